package faults

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"

	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/integration/internal/history"
	"github.com/fenceguard/fenceguard/storage/mysql"
	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// The enforcers, each a way for a resource to check tokens. Every run
// exercises all of them at once, each on its own copy of every item, and
// each next to its control: the same copy with fencing off.
const (
	pgColumn  = "pg-column"    // storage/postgres column mode: one statement claims and reads, or claims and writes
	pgTx      = "pg-tx"        // storage/postgres Tx: claim in fence_tokens, then plain SQL, one transaction
	myColumn  = "mysql-column" // storage/mysql column mode on MariaDB: the claim in the statement that reads or writes
	myTx      = "mysql-tx"     // storage/mysql Tokens.Tx: claim in the high-water table, then plain SQL, one transaction
	httpPG    = "http+pg"      // httpmw (PostgreSQL Fence) in front of a handler in column mode: the demo's setup
	httpMem   = "http+mem"     // httpmw, token.MemoryFence, SerializePerKey, items in the service's memory
	httpRedis = "http+redis"   // the same with redislock.Fence
	httpEtcd  = "http+etcd"    // the same with etcdlock.Fence
	httpZK    = "http+zk"      // the same with zklock.Fence
	grpcPG    = "grpc+pg"      // grpcmw (ClaimInStore) in front of a gRPC handler in column mode
)

// allEnforcers in the order of the summary's columns.
var allEnforcers = []string{pgColumn, pgTx, myColumn, myTx, httpPG, httpMem, httpRedis, httpEtcd, httpZK, grpcPG}

// offSuffix names an enforcer's control copy.
const offSuffix = "/off"

func copyName(enforcer string, fenced bool) string {
	if fenced {
		return enforcer
	}
	return enforcer + offSuffix
}

// PostgreSQL tables of each copy, and their entries in accept_log.
var pgTables = map[string]string{
	pgColumn:             "col_on",
	pgColumn + offSuffix: "col_off",
	pgTx:                 "tx_on",
	pgTx + offSuffix:     "tx_off",
	httpPG:               "http_on",
	httpPG + offSuffix:   "http_off",
	grpcPG:               "grpc_on",
	grpcPG + offSuffix:   "grpc_off",
}

// txTokens is the high-water table of pg-tx, apart from the middleware's
// fence_tokens.
var txTokens = pgx.Identifier{"tx_tokens"}

// copyStore is one copy of the items as a client reaches it.
type copyStore interface {
	name() string
	read(ctx context.Context, item string, t token.Token) (history.State, error)
	write(ctx context.Context, item string, t token.Token, stock *int, val *string) error
}

// openCopies returns the copies a client reaches: every enforcer, fenced and
// off. close releases what they hold.
func openCopies(cfg clientConfig, pool *pgxpool.Pool, mdb *sql.DB) (stores []copyStore, close func(), err error) {
	tr := &http.Transport{MaxIdleConnsPerHost: 32}
	// The service fences /<copy>/{id} on the resource key "id:<item>"; the
	// clients lock the item itself.
	itemKey, err := httpmw.RouteKey("id", "/{copy}/{id}")
	if err != nil {
		return nil, nil, err
	}
	lockKey := func(r *http.Request) (string, bool) {
		k, ok := itemKey(r)
		return strings.TrimPrefix(k, "id:"), ok
	}
	hc := &http.Client{Transport: &httpmw.Transport{Base: tr, Key: lockKey}}
	tokens, err := postgres.NewTokens(postgres.TokensOptions{Name: txTokens})
	if err != nil {
		return nil, nil, err
	}
	myTokens, err := mysql.NewTokens(mysql.TokensOptions{Name: myTxTokens})
	if err != nil {
		return nil, nil, err
	}
	closeAll := tr.CloseIdleConnections
	var gc *grpc.ClientConn
	if slices.Contains(cfg.Enforcers, grpcPG) {
		if gc, err = dialGRPC(cfg.GRPC); err != nil {
			return nil, nil, err
		}
		closeAll = func() {
			tr.CloseIdleConnections()
			gc.Close()
		}
	}
	for _, e := range cfg.Enforcers {
		for _, fenced := range []bool{true, false} {
			broken := fenced && cfg.Broken == e
			name := copyName(e, fenced)
			switch e {
			case pgColumn:
				tb, err := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{pgTables[name]}, Key: "id"})
				if err != nil {
					return nil, nil, err
				}
				stores = append(stores, &pgColumnStore{copy: name, db: pool, table: tb, fenced: fenced, broken: broken})
			case pgTx:
				stores = append(stores, &pgTxStore{copy: name, db: pool, tokens: tokens, fenced: fenced, broken: broken})
			case myColumn:
				tb, err := mysql.NewTable(mysql.TableOptions{Name: []string{myTables[name]}, Key: "id"})
				if err != nil {
					return nil, nil, err
				}
				stores = append(stores, &myColumnStore{copy: name, db: mdb, table: tb, fenced: fenced, broken: broken})
			case myTx:
				stores = append(stores, &myTxStore{copy: name, db: mdb, tokens: myTokens, fenced: fenced, broken: broken})
			case grpcPG:
				stores = append(stores, &grpcStore{copy: name, conn: gc, broken: broken})
			default:
				stores = append(stores, &httpStore{copy: name, http: hc, base: cfg.HTTP + "/" + httpPath(name), broken: broken})
			}
		}
	}
	return stores, closeAll, nil
}

// httpPath is the service's route of a copy: "mem" for http+mem,
// "mem-off" for its control.
func httpPath(copy string) string {
	p := strings.TrimPrefix(strings.TrimSuffix(copy, offSuffix), "http+")
	if strings.HasSuffix(copy, offSuffix) {
		p += "-off"
	}
	return p
}

// pgColumnStore: fenced, Table.Read and Table.Update — the check in the
// statement that reads or writes; off, a plain SELECT and UPDATE that only
// record the token they were given (last_token) for the resource's log.
type pgColumnStore struct {
	copy           string
	db             *pgxpool.Pool
	table          *postgres.Table
	fenced, broken bool
}

func (s *pgColumnStore) name() string { return s.copy }

func (s *pgColumnStore) read(ctx context.Context, item string, t token.Token) (history.State, error) {
	var st history.State
	if !s.fenced || s.broken {
		return plainRead(ctx, s.db, pgTables[s.copy], item)
	}
	err := s.table.Read(ctx, s.db, item, t, []string{"stock", "val"}, &st.Stock, &st.Val)
	if errors.Is(err, postgres.ErrNoRow) {
		err = errNotFound
	}
	return st, err
}

func (s *pgColumnStore) write(ctx context.Context, item string, t token.Token, stock *int, val *string) error {
	if !s.fenced {
		return plainWrite(ctx, s.db, pgTables[s.copy], item, t, stock, val)
	}
	var set []postgres.Clause
	if stock != nil {
		set = append(set, postgres.Set("stock", *stock))
	}
	if val != nil {
		set = append(set, postgres.Set("val", *val))
	}
	err := s.table.Update(ctx, s.db, item, t, set...)
	if errors.Is(err, postgres.ErrNoRow) {
		err = errNotFound
	}
	return err
}

// pgTxStore: fenced, every access is a fenced transaction (Tokens.Tx) whose
// function runs plain SQL; off, the same transactions without the claim.
type pgTxStore struct {
	copy           string
	db             *pgxpool.Pool
	tokens         *postgres.Tokens
	fenced, broken bool
}

func (s *pgTxStore) name() string { return s.copy }

func (s *pgTxStore) tx(ctx context.Context, item string, t token.Token, claim bool, fn func(pgx.Tx) error) error {
	if claim {
		// Without the lease's end: a Tx under a lease that has ended is
		// refused before its claim is sent (ErrHoldExpired), and this
		// copy is here to show what the resource's mark refuses. The
		// lease bound is checked in storage/postgres and integration/frozen.
		return s.tokens.Tx(token.WithExpiry(ctx, nil), s.db, item, t, fn)
	}
	return pgx.BeginFunc(ctx, s.db, fn)
}

func (s *pgTxStore) read(ctx context.Context, item string, t token.Token) (history.State, error) {
	var st history.State
	err := s.tx(ctx, item, t, s.fenced && !s.broken, func(tx pgx.Tx) error {
		var err error
		st, err = plainRead(ctx, tx, pgTables[s.copy], item)
		return err
	})
	return st, err
}

func (s *pgTxStore) write(ctx context.Context, item string, t token.Token, stock *int, val *string) error {
	return s.tx(ctx, item, t, s.fenced, func(tx pgx.Tx) error {
		return plainWrite(ctx, tx, pgTables[s.copy], item, t, stock, val)
	})
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func plainRead(ctx context.Context, db querier, table, item string) (history.State, error) {
	var st history.State
	err := db.QueryRow(ctx, `SELECT stock, val FROM `+table+` WHERE id = $1`, item).Scan(&st.Stock, &st.Val)
	if errors.Is(err, pgx.ErrNoRows) {
		err = errNotFound
	}
	return st, err
}

// plainWrite sets the fields given and records t in last_token, which the
// table's trigger copies into accept_log: a control's log shows the tokens
// of the writes it took, unchecked.
func plainWrite(ctx context.Context, db querier, table, item string, t token.Token, stock *int, val *string) error {
	var id string
	err := db.QueryRow(ctx, `UPDATE `+table+` SET stock = coalesce($2, stock), val = coalesce($3, val), last_token = $4
		WHERE id = $1 RETURNING id`, item, stock, val, int64(t)).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		err = errNotFound
	}
	return err
}

// httpStore is a copy behind the cell's resource service. The transport
// sends the token of the context (the lease's) in X-Fencing-Token, to the
// controls too, which only log it; a 409 stale-token answer comes back as a
// *token.StaleError.
type httpStore struct {
	copy   string
	http   *http.Client
	base   string
	broken bool // reads go without a token, and so claim nothing
}

func (s *httpStore) name() string { return s.copy }

// itemBody is the service's representation of an item, and of a write
// (only the fields set).
type itemBody struct {
	Stock *int    `json:"stock,omitempty"`
	Val   *string `json:"val,omitempty"`
}

func (s *httpStore) read(ctx context.Context, item string, _ token.Token) (history.State, error) {
	if s.broken { // a context without the lease's token: no header, no claim
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), accessTimeout)
		defer cancel()
	}
	var st history.State
	err := s.do(ctx, http.MethodGet, item, nil, &st)
	return st, err
}

func (s *httpStore) write(ctx context.Context, item string, _ token.Token, stock *int, val *string) error {
	return s.do(ctx, http.MethodPut, item, &itemBody{Stock: stock, Val: val}, nil)
}

func (s *httpStore) do(ctx context.Context, method, item string, in *itemBody, out *history.State) error {
	var body io.ReadSeeker
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	var (
		req  *http.Request
		resp *http.Response
		err  error
	)
	// A request the service's socket reset or closed before answering is
	// sent again, up to twice: a client's kept-alive connection can be cut
	// or closed under it (the transport retries only GET and HEAD by
	// itself), and the run must learn what the service answers to the
	// write. Sending it again cannot hide a violation: every write the
	// service admits is in its log.
	for attempt := 0; ; attempt++ {
		if body != nil {
			body.Seek(0, io.SeekStart)
		}
		req, err = http.NewRequestWithContext(ctx, method, s.base+"/"+url.PathEscape(item), body)
		if err != nil {
			return err
		}
		resp, err = s.http.Do(req)
		if err == nil || attempt == 2 || ctx.Err() != nil || !(errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF)) {
			break
		}
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return errNotFound
	case resp.StatusCode != http.StatusOK:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s: %s: %s", method, req.URL.Path, resp.Status, b)
	case out != nil:
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}
