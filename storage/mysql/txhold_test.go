package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/storage/mysql"
	"github.com/fenceguard/fenceguard/token"
)

// A holder frozen inside fn holds the resource only for the hold bound:
// the server closes its idle session, rolling back its writes and its
// claim, and the next holder gets through without waiting for it; the
// frozen holder's Tx returns ErrHoldExpired.
func TestTxFrozenHolderIsCutOff(t *testing.T) {
	db, marks := txSetup(t, mysql.TokensOptions{HoldTimeout: time.Second})
	ctx := ctxFor(t, time.Minute)
	frozen := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- marks.Tx(ctx, db, "sku:1", 1, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `UPDATE items SET v = 1 WHERE id = 1`); err != nil {
				return err
			}
			close(frozen)
			time.Sleep(4 * time.Second) // frozen, holding the claim
			_, err := tx.ExecContext(ctx, `UPDATE items SET v = 11 WHERE id = 1`)
			return err
		})
	}()
	<-frozen
	start := time.Now()
	if err := marks.Tx(ctx, db, "sku:1", 2, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE items SET v = v + 2 WHERE id = 1`)
		return err
	}); err != nil {
		t.Fatalf("next holder: %v", err)
	}
	if waited := time.Since(start); waited > 3*time.Second {
		t.Fatalf("next holder waited %v for the frozen one", waited)
	}
	if err := <-done; !errors.Is(err, mysql.ErrHoldExpired) {
		t.Fatalf("frozen holder: %v, want ErrHoldExpired", err)
	}
	if v := itemV(t, db, 1); v != 2 {
		t.Fatalf("v = %d, want only the next holder's write (2)", v)
	}
}

// A transaction whose lease ends while fn runs does not commit: Tx
// returns ErrHoldExpired and nothing of it is written. A lease already
// over sends nothing.
func TestTxLeaseEndedDoesNotCommit(t *testing.T) {
	db, marks := txSetup(t, mysql.TokensOptions{})
	ctx := ctxFor(t, time.Minute)
	end := time.Now().Add(1500 * time.Millisecond)
	lctx := token.WithExpiry(token.NewContext(ctx, "sku:1", 3), func() time.Time { return end })
	err := marks.Tx(lctx, db, "", 0, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE items SET v = 3 WHERE id = 1`); err != nil {
			return err
		}
		time.Sleep(time.Until(end) + 300*time.Millisecond)
		return nil
	})
	if !errors.Is(err, mysql.ErrHoldExpired) {
		t.Fatalf("Tx past its lease = %v, want ErrHoldExpired", err)
	}
	if v, m := itemV(t, db, 1), mark(t, db, marks, "sku:1"); v != 0 || m != 0 {
		t.Fatalf("v = %d, mark %d after the lease ended; want nothing committed", v, m)
	}
	ran := false
	err = marks.Tx(lctx, db, "", 0, func(*sql.Tx) error { ran = true; return nil })
	if !errors.Is(err, mysql.ErrHoldExpired) || ran {
		t.Fatalf("Tx after the lease = %v (fn ran: %v), want ErrHoldExpired", err, ran)
	}
}

// Tx restores the session's wait_timeout and innodb_lock_wait_timeout on
// the pool's connection when it ends.
func TestTxRestoresSession(t *testing.T) {
	db, marks := txSetup(t, mysql.TokensOptions{HoldTimeout: 2 * time.Second})
	db.SetMaxOpenConns(1)
	ctx := ctxFor(t, time.Minute)
	var inWT, inLW int64
	if err := marks.Tx(ctx, db, "sku:1", 1, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `SELECT @@SESSION.wait_timeout, @@SESSION.innodb_lock_wait_timeout`).Scan(&inWT, &inLW)
	}); err != nil {
		t.Fatal(err)
	}
	if inWT != 2 || inLW > 60 {
		t.Fatalf("inside Tx wait_timeout %d, innodb_lock_wait_timeout %d; want 2, at most 60", inWT, inLW)
	}
	var wt, gwt, lw, glw int64
	if err := db.QueryRowContext(context.Background(), `SELECT @@SESSION.wait_timeout, @@GLOBAL.wait_timeout,
 @@SESSION.innodb_lock_wait_timeout, @@GLOBAL.innodb_lock_wait_timeout`).Scan(&wt, &gwt, &lw, &glw); err != nil {
		t.Fatal(err)
	}
	if wt != gwt || lw != glw {
		t.Fatalf("after Tx the session has wait_timeout %d, innodb_lock_wait_timeout %d; want %d, %d", wt, lw, gwt, glw)
	}
}

// A holder frozen between the lease check and its COMMIT does not commit
// past its lease: the idle bound is set again, to the lease's time left,
// right before the COMMIT, and the server closes the session when it runs
// out.
func TestTxFrozenBeforeCommit(t *testing.T) {
	db, marks := txSetup(t, mysql.TokensOptions{})
	ctx := ctxFor(t, time.Minute)
	end := time.Now().Add(6 * time.Second)
	lctx := token.WithExpiry(token.NewContext(ctx, "sku:1", 3), func() time.Time { return end })
	// Frozen until past the lease's end, but for less than the bound set
	// with the claim (5 s).
	mysql.SetBeforeCommit(func() { time.Sleep(time.Until(end) + 500*time.Millisecond) })
	defer mysql.SetBeforeCommit(nil)
	err := marks.Tx(lctx, db, "", 0, func(tx *sql.Tx) error {
		// Busy, not idle, for 2.4 s: the bound set with the claim does
		// not strike.
		for range 12 {
			if _, err := tx.ExecContext(ctx, `UPDATE items SET v = v + 1 WHERE id = 1`); err != nil {
				return err
			}
			time.Sleep(200 * time.Millisecond)
		}
		return nil
	})
	if !errors.Is(err, mysql.ErrHoldExpired) {
		t.Fatalf("Tx frozen before COMMIT = %v, want ErrHoldExpired", err)
	}
	if v, m := itemV(t, db, 1), mark(t, db, marks, "sku:1"); v != 0 || m != 0 {
		t.Fatalf("v = %d, mark %d; want nothing committed", v, m)
	}
}
