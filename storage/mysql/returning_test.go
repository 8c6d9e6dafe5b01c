package mysql_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/storage/mysql"
)

// Returning reads the row as the Update left it; a refusal leaves the
// destination untouched, and a destination that cannot hold its column
// rolls the Update back.
func TestTableUpdateReturning(t *testing.T) {
	db, items := newItems(t)
	ctx := ctxFor(t, time.Minute)
	var stock int
	var mark uint64
	if err := items.Update(ctx, db, 1, 5, mysql.Add("stock", -3), mysql.Returning("stock", &stock), mysql.Returning("fence_token", &mark)); err != nil {
		t.Fatal(err)
	}
	if stock != 7 || mark != 5 {
		t.Fatalf("Returning: stock %d, mark %d; want 7, 5", stock, mark)
	}
	stock = -1
	stale(t, items.Update(ctx, db, 1, 4, mysql.Add("stock", -1), mysql.Returning("stock", &stock)), 4, 5)
	if err := items.Update(ctx, db, 2, 9, mysql.Add("stock", -1), mysql.Returning("stock", &stock)); !errors.Is(err, mysql.ErrNoRow) {
		t.Fatalf("a missing row: %v, want ErrNoRow", err)
	}
	if err := items.Update(ctx, db, 1, 6, mysql.Add("stock", -1), mysql.Where("stock > ?", 100), mysql.Returning("stock", &stock)); !errors.Is(err, mysql.ErrCondition) {
		t.Fatalf("a false condition: %v, want ErrCondition", err)
	}
	if stock != -1 {
		t.Fatalf("a refused Update wrote %d into the destination", stock)
	}
	if s, _, m := row(t, db); s != 7 || m != 6 {
		t.Fatalf("after the refusals: stock %d, mark %d; want 7 and 6 (claimed by the false condition)", s, m)
	}
	// note is NULL: an int cannot hold it.
	var note int
	if err := items.Update(ctx, db, 1, 8, mysql.Add("stock", -1), mysql.Returning("note", &note)); err == nil {
		t.Fatal("scanning NULL into an int succeeded")
	}
	if s, _, m := row(t, db); s != 7 || m != 6 {
		t.Fatalf("after a failed scan: stock %d, mark %d; want 7, 6 (rolled back)", s, m)
	}
	// In the caller's transaction.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := items.Update(ctx, tx, 1, 8, mysql.Add("stock", -1), mysql.Returning("stock", &stock)); err != nil || stock != 6 {
		t.Fatalf("in a transaction: %v, stock %d; want 6", err, stock)
	}
	if err := items.Update(ctx, tx, 1, 8, mysql.Add("stock", -1), mysql.Returning("note", &note)); err == nil {
		t.Fatal("scanning NULL into an int succeeded")
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if s, _, m := row(t, db); s != 6 || m != 8 {
		t.Fatalf("after the transaction: stock %d, mark %d; want 6, 8 (the failed scan rolled back to its savepoint)", s, m)
	}
}

// One holder decrements from 16 goroutines at once: each Returning sees
// its own decrement, so the values returned are all different — as they
// would not be if the read ran after the UPDATE's lock was released.
func TestTableUpdateReturningExact(t *testing.T) {
	db, items := newItems(t)
	exec(t, db, `UPDATE items SET stock = 1000 WHERE id = 1`)
	ctx := ctxFor(t, 2*time.Minute)
	const workers, perWorker = 16, 10
	var (
		mu   sync.Mutex
		seen = map[int]bool{}
		wg   sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for range perWorker {
				var s int
				if err := items.Update(ctx, db, 1, 5, mysql.Add("stock", -1), mysql.Returning("stock", &s)); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if seen[s] {
					t.Errorf("stock %d returned twice", s)
				}
				seen[s] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if s, _, _ := row(t, db); s != 1000-workers*perWorker || len(seen) != workers*perWorker {
		t.Fatalf("stock %d, %d distinct values returned; want %d, %d", s, len(seen), 1000-workers*perWorker, workers*perWorker)
	}
}
