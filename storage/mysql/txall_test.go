package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/storage/mysql"
	"github.com/fenceguard/fenceguard/token"
)

// TxAll is all or nothing: one stale token refuses the whole transaction,
// fn does not run and no mark moves; all tokens current, every mark moves
// and fn's writes commit.
func TestTxAllAllOrNothing(t *testing.T) {
	db, marks := txSetup(t, mysql.TokensOptions{})
	ctx := ctxFor(t, time.Minute)
	for r, tok := range map[string]token.Token{"a": 5, "b": 10, "c": 5} {
		if err := marks.Fence(db).Claim(ctx, r, tok); err != nil {
			t.Fatal(err)
		}
	}
	write := func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE items SET v = v + 1`)
		return err
	}
	ran := false
	err := marks.TxAll(ctx, db, map[string]token.Token{"a": 7, "b": 8, "c": 7, "d": 7},
		func(tx *sql.Tx) error { ran = true; return write(tx) })
	stale(t, err, 8, 10)
	var se *token.StaleError
	if errors.As(err, &se); se.Resource != "b" {
		t.Fatalf("refused resource %q, want b", se.Resource)
	}
	if ran {
		t.Fatal("fn ran under a stale token")
	}
	for r, want := range map[string]token.Token{"a": 5, "b": 10, "c": 5, "d": 0} {
		if m := mark(t, db, marks, r); m != want {
			t.Fatalf("after the refusal mark of %s = %d, want %d", r, m, want)
		}
	}
	if v := itemV(t, db, 1); v != 0 {
		t.Fatalf("v = %d after the refusal", v)
	}

	// Zero tokens come from the context, each for its own resource.
	cctx := token.NewContext(token.NewContext(ctx, "a", 7), "b", 10)
	if err := marks.TxAll(cctx, db, map[string]token.Token{"a": 0, "b": 0, "c": 7, "d": 7}, write); err != nil {
		t.Fatal(err)
	}
	for r, want := range map[string]token.Token{"a": 7, "b": 10, "c": 7, "d": 7} {
		if m := mark(t, db, marks, r); m != want {
			t.Fatalf("mark of %s = %d, want %d", r, m, want)
		}
	}
	if v := itemV(t, db, 1); v != 1 {
		t.Fatalf("v = %d, want fn's write committed", v)
	}

	for _, c := range []map[string]token.Token{nil, {"": 1}} {
		if err := marks.TxAll(ctx, db, c, write); !errors.Is(err, token.ErrNoResource) {
			t.Fatalf("TxAll(%v) = %v, want ErrNoResource", c, err)
		}
	}
	if err := marks.TxAll(ctx, db, map[string]token.Token{"a": 0}, write); !errors.Is(err, token.ErrMissing) {
		t.Fatalf("zero token without a context: %v, want ErrMissing", err)
	}
}

// Fenced transactions over overlapping sets of resources, given in maps
// (whose order Go randomizes), never deadlock each other: the claims take
// the row locks in one order.
func TestTxAllOverlappingSetsDoNotDeadlock(t *testing.T) {
	db, marks := txSetup(t, mysql.TokensOptions{})
	ctx := ctxFor(t, 2*time.Minute)
	resources := []string{"a", "b", "c", "d", "e"}
	var next atomic.Uint64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 10 {
				c := threeOf(resources, token.Token(next.Add(1)))
				err := marks.TxAll(ctx, db, c, func(tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, `UPDATE items SET v = v + 1 WHERE id = 1`)
					return err
				})
				if err != nil && !errors.Is(err, token.ErrStale) {
					t.Errorf("TxAll: %v", err)
				}
			}
		})
	}
	wg.Wait()
}

// On a small high-water table, where a set covers most of its rows, the
// optimizer would read the marks with a full scan, and that locking read,
// under REPEATABLE READ, locked the rows of other sets as it went, out of
// the claims' order: TxAll over overlapping sets must not deadlock there
// either.
func TestTxAllOverlappingSetsOnASmallTableDoNotDeadlock(t *testing.T) {
	db, marks := txSetup(t, mysql.TokensOptions{})
	ctx := ctxFor(t, 2*time.Minute)
	resources := []string{"\x00", "A", "Z", "a", "a ", "b", "\x80x", "\xff"}
	for _, r := range resources {
		if err := marks.Fence(db).Claim(ctx, r, 1); err != nil {
			t.Fatal(err)
		}
	}
	var next atomic.Uint64
	var deadlocks atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 10 {
				tok := token.Token(next.Add(1) + 1)
				c := map[string]token.Token{}
				for _, i := range rand.Perm(len(resources))[:2+rand.IntN(5)] {
					c[resources[i]] = tok
				}
				err := marks.TxAll(ctx, db, c, func(*sql.Tx) error { return nil })
				switch {
				case errors.Is(err, mysql.ErrDeadlock):
					deadlocks.Add(1)
				case err != nil && !errors.Is(err, token.ErrStale):
					t.Errorf("TxAll: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if n := deadlocks.Load(); n > 0 {
		t.Errorf("%d of 160 TxAll calls deadlocked", n)
	}
}

// TxAll's claims waiting for a holder of one of its resources past the
// context's time are ErrLockTimeout, not stale, and move no mark.
func TestTxAllLockWaitTimeout(t *testing.T) {
	db, marks := txSetup(t, mysql.TokensOptions{})
	ctx := ctxFor(t, time.Minute)
	holding, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- marks.Tx(ctx, db, "b", 1, func(*sql.Tx) error { close(holding); <-release; return nil })
	}()
	<-holding
	wctx, cancel := context.WithTimeout(ctx, 2500*time.Millisecond)
	defer cancel()
	err := marks.TxAll(wctx, db, map[string]token.Token{"a": 2, "b": 2, "c": 2}, func(*sql.Tx) error { return nil })
	close(release)
	if !errors.Is(err, mysql.ErrLockTimeout) || errors.Is(err, token.ErrStale) {
		t.Fatalf("TxAll waiting for b = %v, want ErrLockTimeout", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for r, want := range map[string]token.Token{"a": 0, "b": 1, "c": 0} {
		if m := mark(t, db, marks, r); m != want {
			t.Fatalf("mark of %s = %d, want %d", r, m, want)
		}
	}
}

// Nothing of the session's before the BEGIN may carry a read view into a
// fenced transaction: fn's reads must see what the previous holder
// committed, and under MariaDB's innodb_snapshot_isolation a locking read
// of a row changed since the view fails (1020). 16 goroutines run TxAll
// over overlapping sets of three resources with rising tokens, each
// incrementing a counter per resource by read-modify-write: no 1020, and
// every accepted increment counted.
func TestTxAllSnapshotIsolation(t *testing.T) {
	probe := newDB(t)
	var v sql.NullString
	if err := probe.QueryRow(`SELECT @@GLOBAL.innodb_snapshot_isolation`).Scan(&v); err != nil {
		t.Skipf("no innodb_snapshot_isolation on this server: %v", err)
	}
	db, marks := txSetup(t, mysql.TokensOptions{}, "isolation", "REPEATABLE-READ", "innodb_snapshot_isolation", "ON")
	ctx := ctxFor(t, 2*time.Minute)
	resources := []string{"a", "b", "c", "d", "e"}
	exec(t, db, `CREATE TABLE counts (r VARCHAR(4) PRIMARY KEY, n INT NOT NULL)`,
		`INSERT INTO counts VALUES ('a', 0), ('b', 0), ('c', 0), ('d', 0), ('e', 0)`)
	var next atomic.Uint64
	var accepted sync.Map
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 8 {
				c := threeOf(resources, token.Token(next.Add(1)))
				err := marks.TxAll(ctx, db, c, func(tx *sql.Tx) error {
					for r := range c {
						var n int
						if err := tx.QueryRowContext(ctx, `SELECT n FROM counts WHERE r = ?`, r).Scan(&n); err != nil {
							return err
						}
						if _, err := tx.ExecContext(ctx, `UPDATE counts SET n = ? WHERE r = ?`, n+1, r); err != nil {
							return err
						}
					}
					return nil
				})
				switch {
				case err == nil:
					for r := range c {
						n, _ := accepted.LoadOrStore(r, new(atomic.Int64))
						n.(*atomic.Int64).Add(1)
					}
				case errors.Is(err, token.ErrStale):
				default:
					t.Errorf("TxAll: %v", err)
				}
			}
		})
	}
	wg.Wait()
	for _, r := range resources {
		var n int64
		if err := db.QueryRow(`SELECT n FROM counts WHERE r = ?`, r).Scan(&n); err != nil {
			t.Fatal(err)
		}
		var want int64
		if a, ok := accepted.Load(r); ok {
			want = a.(*atomic.Int64).Load()
		}
		if n != want {
			t.Errorf("%s: counted %d, %d increments accepted", r, n, want)
		}
	}
}

// threeOf claims three of resources, picked at random, for tok.
func threeOf(resources []string, tok token.Token) map[string]token.Token {
	c := map[string]token.Token{}
	for _, i := range rand.Perm(len(resources))[:3] {
		c[resources[i]] = tok
	}
	return c
}
