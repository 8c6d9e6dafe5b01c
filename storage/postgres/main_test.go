package postgres_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/pgserver"
	"github.com/fenceguard/fenceguard/storage/postgres"
)

func TestMain(m *testing.M) {
	if os.Getenv(holdChildEnv) != "" { // a frozen holder of TestTxFrozenHolder
		os.Exit(holdChild())
	}
	harness.DefaultParallel(parallel)
	pgserver.ExamplesNeed()
	examplesFromEnv()
	harness.Main(m)
}

// parallel is how many tests run at once unless -test.parallel says
// otherwise. Most tests wait on lock waits, hold bounds, leases and frozen
// holders, each in a database of its own, rather than use the CPU: go test's
// default of GOMAXPROCS would leave a 2-core machine mostly idle.
const parallel = 4

// discard is a logger for tests that do not look at the audit records.
var discard = slog.New(slog.DiscardHandler)

// ctxFor returns a context that ends with the test or after d.
func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newPool connects to a fresh database of the test's own.
func newPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pg := pgserver.Shared(t)
	cfg, err := pgxpool.ParseConfig(pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 24
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// exec runs statements, failing the test on the first error.
func exec(t testing.TB, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := db.Exec(context.Background(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// setup returns a migrated database with the table
// items(id bigint primary key, stock, note, fence_token) holding row 1
// (stock 10, mark 0), and the Table over it.
func setup(t testing.TB) (*pgxpool.Pool, *postgres.Table) {
	t.Helper()
	pool := newPool(t)
	if err := postgres.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	exec(t, pool,
		`CREATE TABLE items (id bigint PRIMARY KEY, stock int NOT NULL DEFAULT 0, note text, fence_token bigint NOT NULL DEFAULT 0)`,
		`INSERT INTO items (id, stock) VALUES (1, 10)`)
	return pool, newTable(t, postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id"})
}

func newTable(t testing.TB, o postgres.TableOptions) *postgres.Table {
	t.Helper()
	tb, err := postgres.NewTable(o)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// dump returns every row of tables (but a high-water table's floor) as text, to compare before and after a
// call that must not write.
func dump(t testing.TB, pool *pgxpool.Pool, tables ...string) string {
	t.Helper()
	var b strings.Builder
	for _, tbl := range tables {
		var s string
		// Not the floor of pruned marks (resource ''), which Migrate
		// creates in every high-water table.
		q := fmt.Sprintf(`SELECT coalesce(string_agg(r::text, ' ' ORDER BY r::text), '') FROM %s r
 WHERE to_jsonb(r)->>'resource' IS DISTINCT FROM ''`, tbl)
		if err := pool.QueryRow(context.Background(), q).Scan(&s); err != nil {
			t.Fatalf("dump %s: %v", tbl, err)
		}
		fmt.Fprintf(&b, "%s: %s\n", tbl, s)
	}
	return b.String()
}

// row returns item id's stock and mark.
func row(t testing.TB, pool *pgxpool.Pool, id int64) (stock int, mark int64) {
	t.Helper()
	err := pool.QueryRow(context.Background(), `SELECT stock, fence_token FROM items WHERE id = $1`, id).Scan(&stock, &mark)
	if err != nil {
		t.Fatalf("reading item %d: %v", id, err)
	}
	return stock, mark
}

// waitBlocked waits until n backends of the test's database wait for a
// lock, so a test can order a commit after a statement's snapshot.
func waitBlocked(t testing.TB, pool *pgxpool.Pool, n int) []int32 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rows, err := pool.Query(context.Background(), `SELECT pid FROM pg_stat_activity
 WHERE datname = current_database() AND wait_event_type = 'Lock' ORDER BY pid`)
		if err != nil {
			t.Fatal(err)
		}
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			t.Fatal(err)
		}
		if len(pids) >= n {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %d blocked backends, have %d", n, len(pids))
		}
		time.Sleep(5 * time.Millisecond)
	}
}
