package frozen

import (
	"context"
	"errors"
	"net"
	"strconv"
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

// pgPools returns a pool straight to a fresh database and one through a
// proxy in front of the same server.
func pgPools(t *testing.T) (direct, proxied *pgxpool.Pool, p *harness.Proxy) {
	t.Helper()
	db := pgserver.Shared(t)
	cfg, err := pgxpool.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	direct, err = pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(direct.Close)
	up := net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
	p = harness.NewProxy(t, up)
	pcfg := cfg.Copy()
	host, port, _ := net.SplitHostPort(p.Addr())
	pn, _ := strconv.Atoi(port)
	pcfg.ConnConfig.Host, pcfg.ConnConfig.Port = host, uint16(pn)
	pcfg.MaxConns = 2
	proxied, err = pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxied.Close)
	ctx := itest.Ctx(t, 10*time.Second)
	warmPool(t, proxied)
	if err := postgres.Migrate(ctx, direct); err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Exec(ctx, "create table items (id int primary key, v text)"); err != nil {
		t.Fatal(err)
	}
	return direct, proxied, p
}

// warm opens all of pool's connections, so that a Delay later slows
// statements, not connection set-ups.
func warmPool(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	var cs []*pgxpool.Conn
	for range pool.Config().MaxConns {
		c, err := pool.Acquire(itest.Ctx(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	for _, c := range cs {
		c.Release()
	}
}

func rows(t *testing.T, db *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := db.QueryRow(itest.Ctx(t, 5*time.Second), "select count(*) from items").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A Tx whose ctx ends while fn is mid-statement, PostgreSQL delayed (not
// frozen), at several points of the transaction: it returns by its
// deadline plus the rollback's grace, nothing is committed, nothing is
// left idle in transaction, and the pool hands out only working
// connections afterwards.
func TestPostgresTxDelayedCutShort(t *testing.T) {
	t.Parallel()
	direct, pool, p := pgPools(t)
	const delay = 200 * time.Millisecond
	id := 0
	for _, d := range []time.Duration{100, 250, 350, 450, 550} {
		d *= time.Millisecond
		if err := p.Delay(delay); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), d)
		tm := itest.StartTiming(t)
		id++
		first := id
		id++
		err := postgres.Tx(ctx, pool, "r", token.Token(1), func(tx pgx.Tx) error {
			// BEGIN+claim ends at ~200ms, the first insert at ~400ms.
			if _, err := tx.Exec(ctx, "insert into items values ($1, 'a')", first); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "insert into items values ($1, 'b')", first+1)
			return err
		})
		took, allowed := tm.Stop(d + 100*time.Millisecond)
		cancel()
		if took > d+100*time.Millisecond+allowed {
			t.Errorf("deadline %v: Tx returned after %v (allowed %v late): %v", d, took, allowed, err)
		}
		if err == nil {
			t.Errorf("deadline %v: Tx succeeded though it needs ~%v", d, 4*delay)
		}
		if err := p.Delay(0); err != nil {
			t.Fatal(err)
		}
		if n := rows(t, direct); n != 0 {
			t.Fatalf("deadline %v: %d rows committed by a Tx cut short (err %v)", d, n, err)
		}
	}
	// Nothing of ours idle in transaction on the server.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := direct.QueryRow(itest.Ctx(t, 2*time.Second),
			"select count(*) from pg_stat_activity where datname = current_database() and state like 'idle in transaction%'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%d sessions idle in transaction left on the server", n)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The pool is healthy: every connection it hands out works.
	for i := 0; i < 6; i++ {
		id++
		err := postgres.Tx(itest.Ctx(t, 5*time.Second), pool, "r", token.Token(1), func(tx pgx.Tx) error {
			_, err := tx.Exec(context.Background(), "insert into items values ($1, 'ok')", id)
			return err
		})
		if err != nil {
			t.Fatalf("Tx %d after the cut-short ones: %v", i, err)
		}
	}
	if n := rows(t, direct); n != 6 {
		t.Errorf("%d rows after 6 good Tx, want 6", n)
	}
	// Every Tx has returned; a connection it used goes back to the pool
	// once pgx has finished with it, which a busy machine may delay.
	if !itest.Eventually(10*time.Second, func() bool { return pool.Stat().AcquiredConns() == 0 }) {
		t.Errorf("pool: %d connections still acquired 10s after the last Tx returned", pool.Stat().AcquiredConns())
	}
}

// The ctx ends while COMMIT is in flight (PostgreSQL delayed 200ms each
// way, the ctx cancelled 50ms after fn returned): the COMMIT reaches the
// server and commits after Tx's call was cut short. Tx must not report a
// failure for a transaction that committed: it reads the outcome back
// (txid_status) and returns nil, or, if it cannot tell,
// ErrCommitUnknown — never the bare context error.
func TestPostgresTxCtxEndingDuringCommit(t *testing.T) {
	t.Parallel()
	direct, pool, p := pgPools(t)
	if err := p.Delay(200 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := postgres.Tx(ctx, pool, "r", token.Token(1), func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "insert into items values (1, 'a')"); err != nil {
			return err
		}
		time.AfterFunc(50*time.Millisecond, cancel) // COMMIT is then in flight
		return nil
	})
	if err := p.Delay(0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	n := rows(t, direct)
	t.Logf("Tx: %v; rows committed: %d", err, n)
	switch {
	case errors.Is(err, postgres.ErrCommitUnknown):
		var cu *postgres.CommitUnknownError
		if !errors.As(err, &cu) || cu.TxID == 0 {
			t.Errorf("ErrCommitUnknown without a transaction id: %v", err)
		}
	case err == nil && n != 1:
		t.Errorf("Tx returned nil, yet %d rows are committed, want 1", n)
	case err != nil && n != 0:
		t.Errorf("Tx returned %v, yet the transaction committed (%d rows)", err, n)
	}
	if n != 1 {
		t.Errorf("%d rows committed, want 1: the COMMIT was on its way when the ctx ended", n)
	}
}
