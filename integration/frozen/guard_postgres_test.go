package frozen

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/harness/pgserver"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// guard.Do over etcd (lease 3 s) around a fenced transaction with default
// settings: etcd is frozen while fn sits in the transaction for 5 s, so
// the lease ends without a renewal. The transaction must not commit: Tx
// follows the lease guard put in fn's context (nothing set by hand), the
// server ends the idle session at about the lease's end, and Do's error
// says both that the lease was lost and that nothing committed.
func TestGuardDoTxEndsWithLease(t *testing.T) {
	t.Parallel()
	srv := etcdserver.New(t)
	g := newRenewingGuard(t, etcdLocker(t, srv.Addr()), 3*time.Second, time.Second)
	db := pgserver.Shared(t)
	ctx := itest.Ctx(t, time.Minute)
	pool, err := pgxpool.New(ctx, db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS lease_rows; CREATE TABLE lease_rows (who text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			itest.Resume(t, srv)
		}
	}()
	err = g.Do(ctx, "acct:lease", func(ctx context.Context, _ token.Token) error {
		return postgres.Tx(ctx, pool, "", 0, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO lease_rows (who) VALUES ('holder')`); err != nil {
				return err
			}
			itest.Pause(t, srv) // no renewal from here on
			time.Sleep(5 * time.Second)
			return nil
		})
	})
	itest.Resume(t, srv)
	resumed = true
	t.Logf("Do: %v", err)
	if !errors.Is(err, guard.ErrLost) {
		t.Errorf("Do = %v, want it to match guard.ErrLost", err)
	}
	if !errors.Is(err, postgres.ErrHoldExpired) {
		t.Errorf("Do = %v, want it to match postgres.ErrHoldExpired (nothing committed)", err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM lease_rows`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d rows committed after the lease ended", n)
	}
}
