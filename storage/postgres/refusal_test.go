package postgres_test

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// A refused conditional Update tells its outcome in one more statement,
// whose write follows the row to its newest version while its read sees
// the snapshot. When the two disagree — the row's newer version, committed
// while the statement waited for its lock, has a higher mark, or is gone —
// the answer is still exact: stale with the new mark, or no such row.
func TestUpdateExprRefusalRowChangedMeanwhile(t *testing.T) {
	t.Parallel()
	pool, items := setup(t)
	ctx := ctxFor(t, time.Minute)
	for _, c := range []struct {
		name   string
		holder string // what the transaction holding the row commits
		check  func(error)
	}{
		{"mark raised", `UPDATE items SET fence_token = 50 WHERE id = 1`, func(err error) { stale(t, err, 20, 50) }},
		{"row deleted", `DELETE FROM items WHERE id = 1`, func(err error) {
			if !errors.Is(err, postgres.ErrNoRow) {
				t.Fatalf("row deleted meanwhile: %v, want ErrNoRow", err)
			}
		}},
	} {
		exec(t, pool, `INSERT INTO items (id, stock, fence_token) VALUES (1, 0, 10)
 ON CONFLICT (id) DO UPDATE SET stock = 0, fence_token = 10`)
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		exec(t, tx, c.holder)
		// Sold out in the snapshot: the sale misses, the failure path's
		// claim (token 20 above the snapshot's mark 10) waits for the row.
		done := make(chan error, 1)
		go func() { done <- sellOne(ctx, items, pool, 1, 20) }()
		waitBlocked(t, pool, 1)
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		c.check(<-done)
	}
}

// Under concurrency every outcome of a conditional Update is exact: sales
// race holders that raise the mark, restocks that flip the condition, and
// a row that is deleted and re-created, with stale tokens and a missing
// row among them. A StaleError never reports a mark at or below the token
// presented; a ConditionError or a sale leaves the row's mark at least at
// its token; a row that never exists is never anything but ErrNoRow; and
// units sold are exactly what the stock lost.
func TestUpdateExprRefusalsConcurrent(t *testing.T) {
	t.Parallel()
	pool, items := setup(t)
	ctx := ctxFor(t, 2*time.Minute)
	exec(t, pool, `UPDATE items SET stock = 0 WHERE id = 1`,
		`INSERT INTO items (id, stock) VALUES (2, 0)`,
		`ALTER TABLE items ADD CONSTRAINT no_oversell CHECK (stock >= 0)`)

	var (
		clock    atomic.Int64
		sold     atomic.Int64 // units sold of row 2 (never deleted)
		restock  atomic.Int64 // units added to row 2
		claimed2 atomic.Int64 // the highest token a sale or a ConditionError claimed row 2 for
		outcomes [4]atomic.Int64
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		bg       sync.WaitGroup
	)
	clock.Store(1000)
	// Holders with newer tokens raise the marks, slowly, in transactions
	// that keep the row locked for a moment; restocks make the condition
	// true again; row 1 is deleted and re-created.
	bg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			id := 1 + i%2
			if _, err := tx.Exec(ctx, `UPDATE items SET fence_token = greatest(fence_token, $1) WHERE id = $2`, clock.Add(3), id); err != nil {
				t.Error(err)
				tx.Rollback(ctx)
				return
			}
			if id == 2 && i%3 == 0 {
				if _, err := tx.Exec(ctx, `UPDATE items SET stock = stock + 2 WHERE id = 2`); err != nil {
					t.Error(err)
					tx.Rollback(ctx)
					return
				}
			}
			time.Sleep(time.Duration(rand.N(300)) * time.Microsecond)
			if err := tx.Commit(ctx); err != nil {
				t.Error(err)
				return
			}
			if id == 2 && i%3 == 0 {
				restock.Add(2)
			}
		}
	})
	bg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			q := `DELETE FROM items WHERE id = 1`
			if i%2 == 1 {
				q = `INSERT INTO items (id, stock, fence_token) VALUES (1, 1, 0) ON CONFLICT (id) DO NOTHING`
			}
			if _, err := pool.Exec(ctx, q); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(time.Duration(rand.N(500)) * time.Microsecond)
		}
	})

	const perWorker = 150
	for range 6 {
		wg.Go(func() {
			for range perWorker {
				id := int64(1 + rand.N(3)) // 3: never exists
				tok := token.Token(interleaved(&clock))
				if rand.N(4) == 0 {
					tok = token.Token(max(1, int(clock.Load())-500)) // long stale
				}
				err := sellOne(ctx, items, pool, id, tok)
				var (
					se *token.StaleError
					ce *postgres.ConditionError
				)
				switch {
				case err == nil:
					outcomes[0].Add(1)
					if id == 2 {
						sold.Add(1)
						raise(&claimed2, int64(tok))
					}
				case errors.As(err, &se):
					outcomes[1].Add(1)
					if se.Presented != tok || se.Current <= se.Presented {
						t.Errorf("row %d: StaleError %+v for token %d: current not above presented", id, se, tok)
					}
				case errors.As(err, &ce):
					outcomes[2].Add(1)
					if ce.Token != tok {
						t.Errorf("row %d: ConditionError %+v for token %d", id, ce, tok)
					}
					if id == 2 {
						raise(&claimed2, int64(tok))
					}
				case errors.Is(err, postgres.ErrNoRow):
					outcomes[3].Add(1)
					if id == 2 {
						t.Errorf("row 2, never deleted: %v", err)
					}
				default:
					t.Errorf("row %d token %d: %v", id, tok, err)
				}
				if id == 3 && !errors.Is(err, postgres.ErrNoRow) {
					t.Errorf("row 3, never created: %v, want ErrNoRow", err)
				}
				if t.Failed() {
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	bg.Wait()
	stock, mark := row(t, pool, 2)
	if int64(stock) != restock.Load()-sold.Load() {
		t.Fatalf("row 2: stock %d, but %d restocked and %d sold", stock, restock.Load(), sold.Load())
	}
	if mark < claimed2.Load() {
		t.Fatalf("row 2: mark %d, below token %d a sale or a sold-out answer claimed it for", mark, claimed2.Load())
	}
	t.Logf("sold %d, stale %d, sold out %d, no row %d", outcomes[0].Load(), outcomes[1].Load(), outcomes[2].Load(), outcomes[3].Load())
	for i := range outcomes {
		if outcomes[i].Load() == 0 {
			t.Errorf("outcome %d never happened: the test does not exercise it", i)
		}
	}
}

// raise sets a to v if v is higher.
func raise(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}
