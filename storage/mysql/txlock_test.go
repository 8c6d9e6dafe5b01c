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

// A fenced transaction holding one resource blocks no claim of another:
// the claim locks only the mark's own index record (no gap lock), under
// REPEATABLE READ as under READ COMMITTED, for existing marks and for new
// keys on either side of the held one.
func TestTxHoldsOnlyItsOwnMark(t *testing.T) {
	for _, level := range []string{"REPEATABLE-READ", "READ-COMMITTED"} {
		t.Run(level, func(t *testing.T) {
			db, marks := txSetup(t, mysql.TokensOptions{}, "isolation", level)
			ctx := ctxFor(t, time.Minute)
			for _, r := range []string{"k", "m", "p"} {
				if err := marks.Fence(db).Claim(ctx, r, 1); err != nil {
					t.Fatal(err)
				}
			}
			holding, release := make(chan struct{}), make(chan struct{})
			done := make(chan error, 1)
			go func() {
				done <- marks.Tx(ctx, db, "m", 2, func(*sql.Tx) error { close(holding); <-release; return nil })
			}()
			<-holding
			for _, r := range []string{"k", "p", "a", "l", "n", "z"} {
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := marks.Tx(cctx, db, r, 2, func(*sql.Tx) error { return nil })
				cancel()
				if err != nil {
					t.Errorf("claim of %s while m is held: %v", r, err)
				}
			}
			close(release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A fenced statement outside Tx that waits past innodb_lock_wait_timeout
// (1205) is ErrLockTimeout, as inside Tx — not stale, not an unclassified
// error — and writes nothing: a Fence claim, an Update, an Update with
// Returning, a Delete and Upsert's insert, on a connection of their own
// or in a caller's transaction that then commits.
func TestLockWaitTimeoutOutsideTx(t *testing.T) {
	db, items := newMigratedItems(t)
	ctx := ctxFor(t, time.Minute)
	exec(t, db, `INSERT INTO items (id, stock, fence_token) VALUES (10, 0, 0)`)
	if err := mysql.NewFence(db).Claim(ctx, "held", 1); err != nil {
		t.Fatal(err)
	}
	blocker, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback()
	// Rows 1 and 10 and the gap between them (REPEATABLE READ), and the mark.
	exec(t, blocker, `SELECT id FROM items WHERE id <= 10 FOR UPDATE`,
		`SELECT token FROM fence_tokens WHERE resource = 'held' FOR UPDATE`)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	exec(t, conn, `SET SESSION innodb_lock_wait_timeout = 1`)
	var stock int
	calls := map[string]func(mysql.DB) error{
		"claim":  func(d mysql.DB) error { return mysql.NewFence(d).Claim(ctx, "held", 2) },
		"update": func(d mysql.DB) error { return items.Update(ctx, d, 1, 2, mysql.Add("stock", -1)) },
		"returning": func(d mysql.DB) error {
			return items.Update(ctx, d, 1, 2, mysql.Add("stock", -1), mysql.Returning("stock", &stock))
		},
		"delete": func(d mysql.DB) error { return items.Delete(ctx, d, 1, 2) },
		"upsert": func(d mysql.DB) error { return items.Upsert(ctx, d, 5, 2, mysql.Set("stock", 1)) },
	}
	for name, call := range calls {
		if err := call(conn); !errors.Is(err, mysql.ErrLockTimeout) || errors.Is(err, token.ErrStale) {
			t.Errorf("%s on a connection: %v, want ErrLockTimeout", name, err)
		}
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := call(tx); !errors.Is(err, mysql.ErrLockTimeout) {
			t.Errorf("%s in a caller's transaction: %v, want ErrLockTimeout", name, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if err := blocker.Rollback(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM items WHERE fence_token <> 0 OR stock <> 10 AND id = 1 OR id NOT IN (1, 10)`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d rows written by calls that timed out (%v)", n, err)
	}
	if err := db.QueryRow(`SELECT COUNT(*) FROM fence_tokens WHERE resource <> 'held' OR token <> 1`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d marks written by calls that timed out (%v)", n, err)
	}
}

// A statement that commits on its own and is waiting for a row lock when
// ctx ends is not stopped by the connection closing: the server applies
// it once the lock is free. A Fence claim, an Update and a Reset cut off
// that way on a pool or a connection report ErrCommitUnknown, never a
// plain failure, since the write may land after they return.
func TestCancelledLockWaitOutsideTxIsCommitUnknown(t *testing.T) {
	db, items := newMigratedItems(t)
	ctx := ctxFor(t, time.Minute)
	marks, err := mysql.NewTokens(mysql.TokensOptions{Check: token.NoCheck(), Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := marks.Fence(db).Claim(ctx, "held", 1); err != nil {
		t.Fatal(err)
	}
	newConn := func() *sql.Conn {
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	calls := map[string]func(context.Context) error{
		"claim on the pool":  func(c context.Context) error { return marks.Fence(db).Claim(c, "held", 2) },
		"claim on a conn":    func(c context.Context) error { return marks.Fence(newConn()).Claim(c, "held", 2) },
		"update on the pool": func(c context.Context) error { return items.Update(c, db, 1, 2, mysql.Add("stock", -1)) },
		"update on a conn":   func(c context.Context) error { return items.Update(c, newConn(), 1, 2, mysql.Add("stock", -1)) },
		"read":               func(c context.Context) error { return items.Read(c, db, 1, 2, []string{"stock"}, new(int)) },
		"reset":              func(c context.Context) error { _, err := marks.Reset(c, db, "held", 2); return err },
	}
	for name, call := range calls {
		blocker, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		exec(t, blocker, `SELECT id FROM items WHERE id = 1 FOR UPDATE`,
			`SELECT token FROM fence_tokens WHERE resource = 'held' FOR UPDATE`)
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		err = call(cctx)
		cancel()
		if !errors.Is(err, mysql.ErrCommitUnknown) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s, cut off in a lock wait: %v, want ErrCommitUnknown and DeadlineExceeded", name, err)
		}
		if err := blocker.Rollback(); err != nil {
			t.Fatal(err)
		}
	}
}
