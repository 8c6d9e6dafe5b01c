package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/harness/pgserver"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/integration/internal/history"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/locks/zklock"
	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// schema is the cell's database: a table per PostgreSQL copy, all alike, and
// accept_log, where triggers record every access each table accepted, in the
// order it accepted them — the resource's own history. Column mode's reads
// claim by updating the row, so they are logged too; a control's plain
// SELECT is not (it accepts without looking). The claims of fenced
// transactions (tx_tokens) and of the middleware's Fence (fence_tokens) are
// logged the same way.
const schema = `
CREATE TABLE accept_log (
	seq   bigserial PRIMARY KEY,
	tbl   text NOT NULL,
	id    text NOT NULL,
	token bigint NOT NULL,
	kind  text NOT NULL,
	stock integer NOT NULL,
	val   text NOT NULL,
	at    timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE FUNCTION log_item() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO accept_log (tbl, id, token, kind, stock, val) VALUES (TG_TABLE_NAME, NEW.id,
		greatest(NEW.fence_token, NEW.last_token),
		CASE WHEN OLD.stock IS DISTINCT FROM NEW.stock OR OLD.val IS DISTINCT FROM NEW.val THEN 'write' ELSE 'read' END,
		NEW.stock, NEW.val);
	RETURN NULL;
END $$;
CREATE FUNCTION log_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO accept_log (tbl, id, token, kind, stock, val) VALUES (TG_TABLE_NAME, NEW.resource, NEW.token, 'claim', 0, '');
	RETURN NULL;
END $$;
`

// itemTable is the DDL of one copy's table: fence_token is column mode's
// mark (0 where unused), last_token the token a control's write carried
// (recorded, never checked).
func itemTable(name string) string {
	return `CREATE TABLE ` + name + ` (id text PRIMARY KEY, stock integer NOT NULL, val text NOT NULL,
	fence_token bigint NOT NULL DEFAULT 0, last_token bigint NOT NULL DEFAULT 0);
CREATE TRIGGER ` + name + `_log AFTER UPDATE ON ` + name + ` FOR EACH ROW EXECUTE FUNCTION log_item();
`
}

// logSources says which accept_log entries are a copy's history: its
// table's, and the claims made for it (resource keys: the item for tx_tokens,
// "id:<item>" for the middleware's fence_tokens), and which high-water mark
// checked each (history.Accepted.Mark). A fenced transaction's claim and
// statements are one step: one mark. The middleware's Fence and the column
// behind it are two checks one after the other: a request that passed the
// middleware can reach the row after a newer token passed the middleware
// too, and the row's token column orders the two. Each is monotone on its
// own.
type logSource struct{ tbl, idPrefix, mark string }

var logSources = map[string][]logSource{
	pgTx:   {{"tx_on", "", "tx"}, {"tx_tokens", "", "tx"}},
	httpPG: {{"http_on", "", "column"}, {"fence_tokens", "id:", "middleware"}},
}

// resourceService is the resource side of one cell, in the test process:
// the PostgreSQL database, the MySQL one (mysql_test.go), and an HTTP
// service with each HTTP enforcer's routes — /<name>/{id}, fenced by its
// middleware, and /<name>-off/{id}, the same handler without it — and a gRPC service with grpc+pg's two
// services, the fenced one and its control (grpc_test.go).
type resourceService struct {
	pool      *pgxpool.Pool
	dsn       string
	my        *myResource // mysql-column and mysql-tx, on MariaDB
	enforcers []string
	maps      map[string]*mapStore // by copy name
	base      string
	grpc      string // address of the gRPC service, with grpc+pg
}

func newResourceService(t *testing.T, enforcers []string) *resourceService {
	t.Helper()
	ctx := context.Background()
	pg := pgserver.Shared(t)
	pcfg, err := pgxpool.ParseConfig(pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ddl := schema
	for _, name := range sortedValues(pgTables) {
		ddl += itemTable(name)
	}
	if _, err := pool.Exec(ctx, ddl); err != nil {
		t.Fatalf("schema: %v", err)
	}
	tokens, err := postgres.NewTokens(postgres.TokensOptions{Name: txTokens})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []*postgres.Tokens{tokens, nil} {
		if k == nil {
			err = postgres.Migrate(ctx, pool)
		} else {
			err = k.Migrate(ctx, pool)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, tbl := range []string{"tx_tokens", "fence_tokens"} {
		if _, err := pool.Exec(ctx, `CREATE TRIGGER `+tbl+`_log AFTER INSERT OR UPDATE ON `+tbl+
			` FOR EACH ROW EXECUTE FUNCTION log_claim()`); err != nil {
			t.Fatal(err)
		}
	}

	s := &resourceService{pool: pool, dsn: pg.DSN, enforcers: enforcers, maps: map[string]*mapStore{}}
	if slices.Contains(enforcers, myColumn) || slices.Contains(enforcers, myTx) {
		s.my = newMyResource(t)
	}
	mux := http.NewServeMux()
	for _, e := range enforcers {
		if !strings.HasPrefix(e, "http+") {
			continue
		}
		var fenced, off http.Handler
		mwo := httpmw.Options{Resource: httpmw.PathValue("id"), SerializePerKey: true}
		if e == httpPG {
			// The strong setup across processes: the store checks the
			// token in the statement; the middleware refuses early.
			tb, err := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{"http_on"}, Key: "id", LockKey: postgres.LockKeyPrefix("id:")})
			if err != nil {
				t.Fatal(err)
			}
			mwo.Fence, mwo.SerializePerKey = postgres.NewFence(pool), false
			fenced = &pgHandler{db: pool, table: tb, name: "http_on"}
			off = &pgHandler{db: pool, name: "http_off"}
		} else {
			// The strong setup within one process: the Fence decides,
			// and the per-key mutex makes claim and effect one step.
			mwo.Fence = s.fence(t, e)
			on, offStore := newMapStore(), newMapStore()
			s.maps[copyName(e, true)], s.maps[copyName(e, false)] = on, offStore
			fenced, off = on, offStore
		}
		mw, err := httpmw.New(mwo)
		if err != nil {
			t.Fatal(err)
		}
		for _, method := range []string{http.MethodGet, http.MethodPut} {
			mux.Handle(method+" /"+httpPath(copyName(e, true))+"/{id}", mw.Handler(fenced))
			mux.Handle(method+" /"+httpPath(copyName(e, false))+"/{id}", off)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-served
	})
	s.base = "http://" + ln.Addr().String()
	if slices.Contains(enforcers, grpcPG) {
		s.grpc = newGRPCService(t, pool)
	}
	return s
}

// fence is the token.Fence of an HTTP enforcer, on the package's shared
// servers (never faulted: the faults are the lock service's and the
// clients').
func (s *resourceService) fence(t *testing.T, enforcer string) token.Fence {
	t.Helper()
	switch enforcer {
	case httpMem:
		return new(token.MemoryFence)
	case httpRedis:
		db := redisserver.Shared(t)
		rdb := redis.NewClient(&redis.Options{Addr: db.Addr})
		t.Cleanup(func() { rdb.Close() })
		return redislock.NewFence(rdb, redislock.FenceOptions{Prefix: db.Prefix + "fence:"})
	case httpEtcd:
		db := etcdserver.Shared(t)
		cli, err := clientv3.New(etcdConfig(db.Endpoints))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return etcdlock.NewFence(cli, etcdlock.FenceOptions{Prefix: db.Prefix + "fence/"})
	case httpZK:
		z := zkserver.Shared(t)
		conn, _, err := zk.Connect(z.Addrs, 10*time.Second, zk.WithLogger(zkLogger{quietLog}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Close)
		return zklock.NewFence(conn, zklock.FenceOptions{Prefix: z.Chroot + "/fence"})
	}
	t.Fatalf("no fence for %s", enforcer)
	return nil
}

// seed creates items in every copy with the same stock and value.
func (s *resourceService) seed(ctx context.Context, items []string, stock int, val string) error {
	b := &pgx.Batch{}
	for _, tbl := range sortedValues(pgTables) {
		for _, it := range items {
			b.Queue(`INSERT INTO `+tbl+` (id, stock, val) VALUES ($1, $2, $3)`, it, stock, val)
		}
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("seeding: %w", err)
	}
	if s.my != nil {
		if err := s.my.seed(ctx, items, stock, val); err != nil {
			return err
		}
	}
	for _, m := range s.maps {
		m.seed(items, stock, val)
	}
	return nil
}

// collect reads, for every copy of every item, the final state and the
// resource's log. The keys are copy, then item.
func (s *resourceService) collect(ctx context.Context, items []string) (map[string]map[string]history.State, map[string]map[string][]history.Accepted, error) {
	states := map[string]map[string]history.State{}
	logs := map[string]map[string][]history.Accepted{}
	for cp, tbl := range pgTables {
		states[cp] = map[string]history.State{}
		rows, err := s.pool.Query(ctx, `SELECT id, stock, val FROM `+tbl+` WHERE id = ANY($1)`, items)
		if err != nil {
			return nil, nil, err
		}
		for rows.Next() {
			var id string
			var st history.State
			if err := rows.Scan(&id, &st.Stock, &st.Val); err != nil {
				rows.Close()
				return nil, nil, err
			}
			states[cp][id] = st
		}
		if err := rows.Err(); err != nil {
			return nil, nil, err
		}
		logs[cp] = map[string][]history.Accepted{}
		sources := logSources[cp]
		if sources == nil {
			sources = []logSource{{tbl, "", ""}}
		}
		for _, src := range sources {
			var ids []string
			for _, it := range items {
				ids = append(ids, src.idPrefix+it)
			}
			rows, err := s.pool.Query(ctx, `SELECT seq, at, token, kind, stock, val, id FROM accept_log
				WHERE tbl = $1 AND id = ANY($2)`, src.tbl, ids)
			if err != nil {
				return nil, nil, err
			}
			for rows.Next() {
				var e history.Accepted
				var tok int64
				var id string
				if err := rows.Scan(&e.Seq, &e.Time, &tok, &e.Kind, &e.Stock, &e.Val, &id); err != nil {
					rows.Close()
					return nil, nil, err
				}
				e.Token, e.Mark = token.Token(tok), src.mark
				id = strings.TrimPrefix(id, src.idPrefix)
				logs[cp][id] = append(logs[cp][id], e)
			}
			if err := rows.Err(); err != nil {
				return nil, nil, err
			}
		}
		for id := range logs[cp] {
			sort.Slice(logs[cp][id], func(i, j int) bool { return logs[cp][id][i].Seq < logs[cp][id][j].Seq })
		}
	}
	if s.my != nil {
		if err := s.my.collect(ctx, items, states, logs); err != nil {
			return nil, nil, err
		}
	}
	for cp, m := range s.maps {
		states[cp], logs[cp] = m.collect(items)
	}
	return states, logs, nil
}

// pgHandler serves http+pg's items from PostgreSQL: fenced, in column mode
// with the token the middleware put in the request context; without a
// table (the control), with plain SQL, recording the header's token
// unchecked.
type pgHandler struct {
	db    *pgxpool.Pool
	table *postgres.Table
	name  string
}

func (h *pgHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, ctx := r.PathValue("id"), r.Context()
	_, _, fenced := token.FromContext(ctx) // tokenless reads pass the middleware unchecked
	var st history.State
	var err error
	switch {
	case r.Method == http.MethodGet && h.table != nil && fenced:
		err = h.table.Read(ctx, h.db, id, 0, []string{"stock", "val"}, &st.Stock, &st.Val)
	case r.Method == http.MethodGet:
		st, err = plainRead(ctx, h.db, h.name, id)
	default:
		var body itemBody
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if h.table != nil {
			var set []postgres.Clause
			if body.Stock != nil {
				set = append(set, postgres.Set("stock", *body.Stock))
			}
			if body.Val != nil {
				set = append(set, postgres.Set("val", *body.Val))
			}
			err = h.table.Update(ctx, h.db, id, 0, set...)
		} else {
			err = plainWrite(ctx, h.db, h.name, id, headerToken(r), body.Stock, body.Val)
		}
	}
	switch {
	case httpmw.WriteStale(w, err):
	case errors.Is(err, postgres.ErrNoRow), errors.Is(err, errNotFound):
		http.NotFound(w, r)
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	default:
		writeJSON(w, st)
	}
}

// headerToken is the token a request carries, for a control's log: parsed,
// never checked. 0 when there is none.
func headerToken(r *http.Request) token.Token {
	if _, t, ok := token.FromContext(r.Context()); ok {
		return t
	}
	t, _ := token.Parse(r.Header.Get(token.Header))
	return t
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// mapStore keeps items in memory, behind the HTTP middleware of http+mem,
// http+redis, http+etcd and http+zk (fenced) or behind nothing (their
// controls). Its log is appended under the same mutex as the change, so it
// is the order in which the store took the accesses.
type mapStore struct {
	mu    sync.Mutex
	items map[string]*mapItem // guarded by mu
	seq   int64               // guarded by mu
}

type mapItem struct {
	state history.State
	log   []history.Accepted
}

func newMapStore() *mapStore { return &mapStore{items: map[string]*mapItem{}} }

func (m *mapStore) seed(items []string, stock int, val string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range items {
		m.items[id] = &mapItem{state: history.State{Stock: stock, Val: val}}
	}
}

func (m *mapStore) collect(items []string) (map[string]history.State, map[string][]history.Accepted) {
	m.mu.Lock()
	defer m.mu.Unlock()
	states, logs := map[string]history.State{}, map[string][]history.Accepted{}
	for _, id := range items {
		if it := m.items[id]; it != nil {
			states[id], logs[id] = it.state, append([]history.Accepted(nil), it.log...)
			delete(m.items, id) // the run is over; keep the store small
		}
	}
	return states, logs
}

func (m *mapStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body itemBody
	if r.Method == http.MethodPut {
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	tok := headerToken(r)
	m.mu.Lock()
	defer m.mu.Unlock()
	it := m.items[r.PathValue("id")]
	if it == nil {
		http.NotFound(w, r)
		return
	}
	kind := history.Read
	if r.Method == http.MethodPut {
		kind = history.Write
		if body.Stock != nil {
			it.state.Stock = *body.Stock
		}
		if body.Val != nil {
			it.state.Val = *body.Val
		}
	}
	m.seq++
	it.log = append(it.log, history.Accepted{Seq: m.seq, Time: time.Now(), Token: tok, Kind: kind, Stock: it.state.Stock, Val: it.state.Val})
	writeJSON(w, it.state)
}

func sortedValues(m map[string]string) []string {
	var vs []string
	for _, v := range m {
		vs = append(vs, v)
	}
	sort.Strings(vs)
	return vs
}

// myDSN is the data source name of the cell's MySQL database, "" without
// one.
func (s *resourceService) myDSN() string {
	if s.my == nil {
		return ""
	}
	return s.my.dsn
}
