package httpmw_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/harness/pgserver"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// bank is a payments service as its docs have it written: accounts keyed
// "account:{id:int}", a debit that is one column-mode statement
// (Add + Where), every store error answered by httpmw.WriteError, and a
// client that reads refusals as errors through the Transport. It records
// the error each handler met, so a test can compare both sides.
type bank struct {
	pool   *pgxpool.Pool
	url    string
	client *http.Client

	mu     sync.Mutex
	served error // the store's error the last request was answered with
}

func newBank(t *testing.T) *bank {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgserver.Shared(t).DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, `CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	newTable := func(check token.Check) *postgres.Table {
		tb, err := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{"accounts"}, Key: "id",
			LockKey: postgres.LockKeyPrefix("account:"), Check: check})
		if err != nil {
			t.Fatal(err)
		}
		return tb
	}
	accounts := newTable(nil)              // the default check: the clock bound
	unchecked := newTable(token.NoCheck()) // lets a token beyond bigint reach the range check
	if err := accounts.AddTokenColumn(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO accounts (id, balance) VALUES (7, 100)`); err != nil {
		t.Fatal(err)
	}
	// A pool whose server is gone: nothing listens on its port.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down, err := pgxpool.New(ctx, fmt.Sprintf("postgres://nobody@%s/none?connect_timeout=2", l.Addr()))
	l.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(down.Close)

	b := &bank{pool: pool}
	// The middleware only checks; the store claims, in the statement.
	mw := newMW(t, httpmw.Options{Resource: httpmw.PathValue("account:{id:int}"), Fence: httpmw.ClaimInStore, Check: token.NoCheck()})
	debit := func(tb *postgres.Table, db postgres.DB, shift int64) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64) // canonical: the middleware checked
			amount, _ := strconv.ParseInt(r.URL.Query().Get("amount"), 10, 64)
			err := tb.Update(r.Context(), db, id+shift, 0, postgres.Add("balance", -amount), postgres.Where("balance >= $1", amount))
			b.answer(w, r, err)
		})
	}
	mux := http.NewServeMux()
	mux.Handle("POST /accounts/{id}/debit", mw.Handler(debit(accounts, pool, 0)))
	mux.Handle("POST /unchecked/{id}/debit", mw.Handler(debit(unchecked, pool, 0)))
	mux.Handle("POST /down/{id}/debit", mw.Handler(debit(accounts, down, 0)))
	mux.Handle("POST /buggy/{id}/debit", mw.Handler(debit(accounts, pool, 1))) // debits the next account: a bug
	mux.Handle("GET /accounts/{id}", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
		var balance int64
		b.answer(w, r, accounts.Read(r.Context(), pool, id, 0, []string{"balance"}, &balance))
	})))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	b.url = srv.URL
	key, err := httpmw.RouteKey("account:{id:int}", "/accounts/{id}/debit", "/unchecked/{id}/debit", "/down/{id}/debit", "/buggy/{id}/debit", "/accounts/{id}")
	if err != nil {
		t.Fatal(err)
	}
	b.client = &http.Client{Transport: &httpmw.Transport{Base: srv.Client().Transport, Key: key}}
	t.Cleanup(b.client.CloseIdleConnections)
	return b
}

func (b *bank) answer(w http.ResponseWriter, r *http.Request, err error) {
	b.mu.Lock()
	b.served = err
	b.mu.Unlock()
	if err != nil {
		httpmw.WriteError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// call sends method path under the token of the lock "account:<id>" of
// the path's account (none when tok is 0) and returns the client's error
// and the store error the server met.
func (b *bank) call(t *testing.T, method, path string, tok token.Token) (client, served error) {
	t.Helper()
	b.mu.Lock()
	b.served = nil
	b.mu.Unlock()
	ctx := context.Background()
	if tok != 0 {
		var id int
		if _, err := fmt.Sscanf(path, "/accounts/%d/", &id); err != nil {
			id = 7 // the other routes' tests use account 7
		}
		ctx = token.NewContext(ctx, "account:"+strconv.Itoa(id), tok)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.client.Do(req)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			err = fmt.Errorf("status %d, not a refusal", resp.StatusCode)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return err, b.served
}

// Every error of the PostgreSQL enforcer reaches the client through
// WriteError and the Transport as an error matching the sentinel the
// server's error matched, with the problem's status and type.
func TestWriteErrorRoundTripsPostgres(t *testing.T) {
	b := newBank(t)
	now := token.Token(time.Now().UnixMicro()) // a token a clock-floored locker could grant
	if err, _ := b.call(t, "POST", "/accounts/7/debit?amount=10", now); err != nil {
		t.Fatalf("a valid debit: %v", err)
	}
	cases := []struct {
		name   string
		path   string
		tok    token.Token
		status int
		typ    string
		want   error // the sentinel both sides match; nil: see check
		check  func(t *testing.T, client error)
	}{
		{"condition false", "POST /accounts/7/debit?amount=1000", now, 409, httpmw.TypeCondition, token.ErrCondition, nil},
		{"no such row", "POST /accounts/8/debit?amount=1", now, 404, httpmw.TypeNoResource, token.ErrNotFound, nil},
		{"stale", "POST /accounts/7/debit?amount=1", now - 1, 409, httpmw.TypeStale, token.ErrStale, func(t *testing.T, err error) {
			var se *token.StaleError
			if !errors.As(err, &se) || se.Current != now || se.Presented != now-1 {
				t.Errorf("stale error %+v, want presented %d below %d", se, now-1, now)
			}
		}},
		{"forged", "POST /accounts/7/debit?amount=1", math.MaxInt64, 403, httpmw.TypeForged, token.ErrForged, func(t *testing.T, err error) {
			var fe *token.ForgedError
			if !errors.As(err, &fe) || fe.Presented != math.MaxInt64 || fe.Bound == 0 || fe.Bound >= math.MaxInt64 {
				t.Errorf("forged error %+v, want the bound below the token", fe)
			}
		}},
		{"beyond bigint", "POST /unchecked/7/debit?amount=1", math.MaxInt64 + 1, 400, httpmw.TypeInvalid, token.ErrInvalid, nil},
		{"key mismatch", "POST /buggy/7/debit?amount=1", now, 500, httpmw.TypeKeyMismatch, nil, func(t *testing.T, err error) {
			if !errors.Is(err, httpmw.ErrKeyMismatch) {
				t.Errorf("client error %v, want ErrKeyMismatch", err)
			}
		}},
		{"store unavailable", "POST /down/7/debit?amount=1", now, 503, httpmw.TypeUnavailable, nil, func(t *testing.T, err error) {
			if !errors.Is(err, httpmw.ErrUnavailable) {
				t.Errorf("client error %v, want ErrUnavailable", err)
			}
		}},
		{"token needed, none sent", "GET /accounts/7", 0, 428, httpmw.TypeMissing, token.ErrMissing, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			method, path, _ := cut(c.path)
			client, served := b.call(t, method, path, c.tok)
			if served == nil {
				t.Fatalf("the store accepted the request; client: %v", client)
			}
			var p *httpmw.Problem
			if !errors.As(client, &p) || p.Status != c.status || p.Type != c.typ {
				t.Fatalf("client error %v (%+v), want a %d %s problem; the store said %v", client, p, c.status, c.typ, served)
			}
			if c.want != nil && (!errors.Is(served, c.want) || !errors.Is(client, c.want)) {
				t.Errorf("server error %v, client error %v: want both to match %v", served, client, c.want)
			}
			if c.check != nil {
				c.check(t, client)
			}
		})
	}
	var balance int64
	if err := b.pool.QueryRow(context.Background(), `SELECT balance FROM accounts WHERE id = 7`).Scan(&balance); err != nil || balance != 90 {
		t.Errorf("balance %d (%v), want 90: only the valid debit may have been made", balance, err)
	}
}

func cut(s string) (method, path string, ok bool) {
	for i := range len(s) {
		if s[i] == ' ' {
			return s[:i], s[i+1:], true
		}
	}
	return "", s, false
}

// The same round trip with a Redis Fence as the store: a handler that
// claims in it answers its stale refusal and its unreachable server with
// WriteError, and the client gets a StaleError and ErrUnavailable.
func TestWriteErrorRoundTripsRedis(t *testing.T) {
	db := redisserver.Shared(t)
	up := redislock.NewFence(redisClient(t, db.Addr), redislock.FenceOptions{Prefix: db.Prefix, Check: token.NoCheck()})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	down := redislock.NewFence(redisClient(t, addr), redislock.FenceOptions{Check: token.NoCheck()})

	mw := newMW(t, httpmw.Options{Resource: httpmw.PathValue("job:{id}"), Fence: httpmw.ClaimInStore, Check: token.NoCheck()})
	claim := func(f token.Fence) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key, t, _ := token.FromContext(r.Context())
			if err := f.Claim(r.Context(), key, t); err != nil {
				httpmw.WriteError(w, r, err)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
	}
	mux := http.NewServeMux()
	mux.Handle("PUT /jobs/{id}", mw.Handler(claim(up)))
	mux.Handle("PUT /down/{id}", mw.Handler(claim(down)))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	key, err := httpmw.RouteKey("job:{id}", "/jobs/{id}", "/down/{id}")
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &httpmw.Transport{Base: srv.Client().Transport, Key: key}}
	defer client.CloseIdleConnections()
	put := func(path string, tok token.Token) error {
		req, _ := http.NewRequestWithContext(token.NewContext(context.Background(), "job:1", tok), "PUT", srv.URL+path+"1", nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := put("/jobs/", 20); err != nil {
		t.Fatal(err)
	}
	var se *token.StaleError
	if err := put("/jobs/", 19); !errors.As(err, &se) || se.Current != 20 || se.Presented != 19 {
		t.Errorf("a stale claim: %v, want a StaleError 19 < 20", err)
	}
	var p *httpmw.Problem
	if err := put("/down/", 21); !errors.Is(err, httpmw.ErrUnavailable) || !errors.As(err, &p) || p.Status != http.StatusServiceUnavailable {
		t.Errorf("an unreachable Redis: %v, want ErrUnavailable in a 503", err)
	}
}
