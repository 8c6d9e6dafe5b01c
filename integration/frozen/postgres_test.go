package frozen

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/pgserver"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// pgEnv is a PostgreSQL server of the test's own (to freeze), a pool on it
// or on a proxy in front of it, the items table in column mode and the
// high-water table.
type pgEnv struct {
	srv   *harness.Server
	proxy *harness.Proxy
	pool  *pgxpool.Pool // through the proxy
	admin *pgxpool.Pool // direct, for checks after the fault
	items *postgres.Table
	k     *postgres.Tokens
	lazy  *postgres.Tokens // ClaimWithFirstStatement
}

func newPG(t *testing.T) *pgEnv {
	t.Helper()
	srv := pgserver.New(t)
	ctx := itest.Ctx(t, 30*time.Second)
	admin, err := pgxpool.New(ctx, pgserver.DSN(srv))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	if _, err := admin.Exec(ctx, `CREATE TABLE items (id bigint PRIMARY KEY, stock int NOT NULL, fence_token bigint NOT NULL DEFAULT 0);
		CREATE TABLE log (resource text, note text)`); err != nil {
		t.Fatal(err)
	}
	if err := postgres.Migrate(ctx, admin); err != nil {
		t.Fatal(err)
	}
	proxy := harness.NewProxy(t, srv.Addr())
	cfg, err := pgxpool.ParseConfig(pgserver.DSN(srv))
	if err != nil {
		t.Fatal(err)
	}
	var host string
	var port uint16
	if _, err := fmt.Sscanf(proxy.Addr(), "127.0.0.1:%d", &port); err != nil {
		t.Fatal(err)
	}
	host = "127.0.0.1"
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, port
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	items, err := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id", Check: token.NoCheck()})
	if err != nil {
		t.Fatal(err)
	}
	k, err := postgres.NewTokens(postgres.TokensOptions{Check: token.NoCheck()})
	if err != nil {
		t.Fatal(err)
	}
	lazy, err := postgres.NewTokens(postgres.TokensOptions{Check: token.NoCheck(), ClaimWithFirstStatement: true})
	if err != nil {
		t.Fatal(err)
	}
	return &pgEnv{srv: srv, proxy: proxy, pool: pool, admin: admin, items: items, k: k, lazy: lazy}
}

func (e *pgEnv) row(t *testing.T, id int64) (stock int, mark int64) {
	t.Helper()
	if err := e.admin.QueryRow(itest.Ctx(t, 10*time.Second), `SELECT stock, fence_token FROM items WHERE id = $1`, id).Scan(&stock, &mark); err != nil {
		t.Fatal(err)
	}
	return stock, mark
}

func (e *pgEnv) mark(t *testing.T, resource string) token.Token {
	t.Helper()
	hw, err := e.k.HighWater(itest.Ctx(t, 10*time.Second), e.admin, resource)
	if err != nil {
		t.Fatal(err)
	}
	return hw
}

func (e *pgEnv) logRows(t *testing.T, resource string) int {
	t.Helper()
	var n int
	if err := e.admin.QueryRow(itest.Ctx(t, 10*time.Second), `SELECT count(*) FROM log WHERE resource = $1`, resource).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// fault is a way to stop PostgreSQL answering, and to undo it.
type fault struct {
	name    string
	inject  func(t *testing.T, e *pgEnv)
	restore func(t *testing.T, e *pgEnv)
}

var pgFaults = []fault{
	{"frozen", func(t *testing.T, e *pgEnv) { itest.Pause(t, e.srv) }, func(t *testing.T, e *pgEnv) { itest.Resume(t, e.srv) }},
	{"blackholed", func(t *testing.T, e *pgEnv) {
		if err := e.proxy.Blackhole(); err != nil {
			t.Fatal(err)
		}
	}, func(t *testing.T, e *pgEnv) {
		if err := e.proxy.Restore(); err != nil {
			t.Fatal(err)
		}
	}},
}

// TestPostgresCallsFaulted: with PostgreSQL frozen or blackholed, the
// autocommitted calls of column mode, the Fence, Tokens.Reset and
// HighWater, and a Tx whose claim is in flight, return by their deadline
// with an error matching context.DeadlineExceeded (context.Canceled when
// cancelled); after the fault a row is either entirely written or not at
// all, and a Tx cut short moved no mark and wrote nothing.
func TestPostgresCallsFaulted(t *testing.T) {
	t.Parallel()
	e := newPG(t)
	ctx := itest.Ctx(t, 60*time.Second)
	const base = token.Token(100)
	for i := int64(1); i <= 3; i++ {
		if _, err := e.admin.Exec(ctx, `INSERT INTO items VALUES ($1, 10, $2)`, i, int64(base)); err != nil {
			t.Fatal(err)
		}
	}
	fence := e.k.Fence(e.pool)
	if err := fence.Claim(ctx, "fres", base); err != nil {
		t.Fatal(err)
	}
	for _, f := range pgFaults {
		t.Run(f.name, func(t *testing.T) {
			if _, err := e.admin.Exec(ctx, `UPDATE items SET stock = 10, fence_token = $1`, int64(base)); err != nil {
				t.Fatal(err)
			}
			// Warm the pool.
			for range 4 {
				if _, err := fence.HighWater(ctx, "fres"); err != nil {
					t.Fatal(err)
				}
			}
			// The caller's transactions for the nested Tx, begun before the
			// fault; rolled back (their connection closed) after it.
			outers := make(chan pgx.Tx, 3)
			for range 3 {
				outer, err := e.pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				outers <- outer
				defer outer.Rollback(context.Background())
			}
			f.inject(t, e)
			txRes := "tx-" + f.name
			calls := map[string]func(ctx context.Context) error{
				"Table.Update": func(ctx context.Context) error {
					return e.items.Update(ctx, e.pool, int64(1), base+1, postgres.Add("stock", -1))
				},
				"Table.Read": func(ctx context.Context) error {
					var s int
					return e.items.Read(ctx, e.pool, int64(2), base+1, []string{"stock"}, &s)
				},
				"Table.Upsert": func(ctx context.Context) error {
					return e.items.Upsert(ctx, e.pool, int64(3), base+1, postgres.Set("stock", 7))
				},
				"Table.Reset": func(ctx context.Context) error {
					_, err := e.items.Reset(ctx, e.pool, int64(2), base)
					return err
				},
				"Fence.Claim":     func(ctx context.Context) error { return fence.Claim(ctx, "fres", base+1) },
				"Fence.HighWater": func(ctx context.Context) error { _, err := fence.HighWater(ctx, "fres"); return err },
				"Fence.Reset":     func(ctx context.Context) error { _, err := fence.Reset(ctx, "fres2", base); return err },
				"Tokens.Tx": func(ctx context.Context) error {
					return e.k.Tx(ctx, e.pool, txRes, base+1, func(tx pgx.Tx) error {
						_, err := tx.Exec(ctx, `INSERT INTO log VALUES ($1, 'fn ran')`, txRes)
						return err
					})
				},
				"Tokens.Tx(lazy)": func(ctx context.Context) error {
					return e.lazy.Tx(ctx, e.pool, txRes, base+1, func(tx pgx.Tx) error {
						_, err := tx.Exec(ctx, `INSERT INTO log VALUES ($1, 'fn ran')`, txRes)
						return err
					})
				},
				"Tokens.Tx(nested)": func(ctx context.Context) error {
					outer := <-outers
					return e.k.Tx(ctx, outer, txRes, base+1, func(tx pgx.Tx) error {
						_, err := tx.Exec(ctx, `INSERT INTO log VALUES ($1, 'fn ran')`, txRes)
						return err
					})
				},
			}
			for name, call := range calls {
				for _, d := range []time.Duration{40 * time.Millisecond, 250 * time.Millisecond} {
					byDeadline(t, fmt.Sprintf("%s (%s, %v)", name, f.name, d), d, call)
				}
				byCancel(t, fmt.Sprintf("%s (%s, cancelled)", name, f.name), 100*time.Millisecond, call)
			}
			f.restore(t, e)
			time.Sleep(200 * time.Millisecond) // let what the server got run
			for i := int64(1); i <= 3; i++ {
				stock, mark := e.row(t, i)
				switch {
				case mark == int64(base) && stock == 10:
				case mark == int64(base+1) && (i == 2 || stock != 10):
					// A statement the server received before the client gave
					// up ran (outcome unknown, as documented), as a whole.
				default:
					t.Errorf("row %d after the fault: stock %d, mark %d: half written", i, stock, mark)
				}
			}
			if n := e.logRows(t, txRes); n != 0 {
				t.Errorf("a Tx cut short left %d rows of fn's behind", n)
			}
			if m := e.mark(t, txRes); m != 0 {
				t.Errorf("a Tx cut short left the mark %d", m)
			}
			// Everything works again afterwards.
			if err := e.items.Update(ctx, e.pool, int64(1), base+2, postgres.Add("stock", 0)); err != nil {
				t.Errorf("Update after the fault: %v", err)
			}
		})
	}
}

// TestPostgresTxFaultedMidTransaction: the fault strikes inside fn,
// after the claim and one write: fn's next statement (or the COMMIT)
// returns by the deadline with the context's error, and after the fault
// neither fn's writes nor the claim's mark are there — or, for a COMMIT
// the server received, all of them are.
func TestPostgresTxFaultedMidTransaction(t *testing.T) {
	t.Parallel()
	e := newPG(t)
	ctx := itest.Ctx(t, 60*time.Second)
	for _, f := range pgFaults {
		for _, where := range []string{"statement", "commit", "lazy-statement", "lazy-commit"} {
			t.Run(f.name+"/"+where, func(t *testing.T) {
				k := e.k
				if strings.HasPrefix(where, "lazy-") {
					k, where = e.lazy, strings.TrimPrefix(where, "lazy-")
				}
				res := "mid-" + f.name + "-" + where + "-" + "fence_tokens" + fmt.Sprint(k == e.lazy)
				if err := e.k.Fence(e.admin).Claim(ctx, res, 50); err != nil {
					t.Fatal(err)
				}
				err := byDeadline(t, "Tx", 600*time.Millisecond, func(cctx context.Context) error {
					return k.Tx(cctx, e.pool, res, 60, func(tx pgx.Tx) error {
						if _, err := tx.Exec(cctx, `INSERT INTO log VALUES ($1, 'first')`, res); err != nil {
							return err
						}
						f.inject(t, e)
						if where == "commit" {
							return nil
						}
						_, err := tx.Exec(cctx, `INSERT INTO log VALUES ($1, 'second')`, res)
						return err
					})
				})
				_ = err
				f.restore(t, e)
				time.Sleep(200 * time.Millisecond)
				n, m := e.logRows(t, res), e.mark(t, res)
				switch {
				case n == 0 && m == 50:
				case where == "commit" && f.name == "frozen" && n == 1 && m == 60:
					// The COMMIT reached the frozen server's socket before
					// the client gave up: it committed, all of it.
				default:
					t.Errorf("after the fault: %d rows of fn's, mark %d: half written", n, m)
				}
			})
		}
	}
}

// TestPostgresTxRollbackByDeadline: fn returns (its context ended, as when it
// waits on a lease's context or an HTTP call) while PostgreSQL is frozen or
// blackholed and nothing of pgx's is in flight: Tx's rollback is bounded by
// the caller's deadline (plus a short clean-up allowance), so Tx returns by
// it, for the eager claim and ClaimWithFirstStatement alike.
func TestPostgresTxRollbackByDeadline(t *testing.T) {
	t.Parallel()
	e := newPG(t)
	for _, f := range pgFaults {
		for _, k := range []*postgres.Tokens{e.k, e.lazy} {
			t.Run(f.name, func(t *testing.T) {
				res := "rb-" + f.name + fmt.Sprint(k == e.lazy)
				byDeadline(t, "Tx (fn waits for its context)", 500*time.Millisecond, func(cctx context.Context) error {
					return k.Tx(cctx, e.pool, res, 70, func(tx pgx.Tx) error {
						if _, err := tx.Exec(cctx, `INSERT INTO log VALUES ($1, 'first')`, res); err != nil {
							return err
						}
						f.inject(t, e)
						<-cctx.Done() // e.g. waiting on the lease's context, or an HTTP call
						return cctx.Err()
					})
				})
				f.restore(t, e)
			})
		}
	}
}

// TestPostgresTxErrorRollbackByDeadline is the same with fn failing on its
// own (no context involved) while the server is frozen: Tx returns fn's
// error by the caller's deadline.
func TestPostgresTxErrorRollbackByDeadline(t *testing.T) {
	t.Parallel()
	e := newPG(t)
	res := "rb-err"
	errFn := errors.New("fn failed")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	tm := itest.StartTiming(t)
	err := e.k.Tx(ctx, e.pool, res, 70, func(tx pgx.Tx) error {
		itest.Pause(t, e.srv)
		return errFn
	})
	took, allowed := tm.Stop(2 * time.Second)
	if !errors.Is(err, errFn) {
		t.Errorf("Tx: %v, want fn's error", err)
	}
	if took > 2*time.Second+allowed {
		t.Errorf("Tx returned %v after it began, past its 2s deadline", took)
	}
	itest.Resume(t, e.srv)
}
