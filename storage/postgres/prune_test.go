package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// age makes the marks of resources look idle for an hour and a day.
func age(t testing.TB, pool *pgxpool.Pool, resources ...string) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `UPDATE fence_tokens SET updated_at = now() - interval '25 hours' WHERE resource = ANY($1)`, resources)
	if err != nil {
		t.Fatal(err)
	}
}

func rows(t testing.TB, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM fence_tokens WHERE resource <> ''`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func wantStale(t testing.TB, err error, cur token.Token) {
	t.Helper()
	var se *token.StaleError
	if !errors.As(err, &se) || se.Current != cur {
		t.Fatalf("got %v, want a StaleError with current %d", err, cur)
	}
}

// Prune deletes idle marks and keeps what they refused: a pruned key, and
// any key without a mark, is compared with the floor.
func TestPruneFloor(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxFor(t, time.Minute)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	f := postgres.NewFence(pool)
	for k, tok := range map[string]token.Token{"sku:a": 100, "sku:b": 70, "sku:live": 50} {
		if err := f.Claim(ctx, k, tok); err != nil {
			t.Fatal(err)
		}
	}
	age(t, pool, "sku:a", "sku:b")
	n, err := postgres.Prune(ctx, pool, time.Hour)
	if err != nil || n != 2 {
		t.Fatalf("Prune = %d, %v; want the 2 idle marks", n, err)
	}
	if got := rows(t, pool); got != 1 {
		t.Fatalf("%d marks left, want 1", got)
	}
	if fl, err := postgres.NewFence(pool).HighWater(ctx, "sku:b"); err != nil || fl != 100 {
		t.Fatalf("HighWater of pruned sku:b = %d, %v; want the floor 100", fl, err)
	}
	k, _ := postgres.NewTokens(postgres.TokensOptions{})
	if fl, err := k.Floor(ctx, pool); err != nil || fl != 100 {
		t.Fatalf("Floor = %d, %v; want 100", fl, err)
	}
	// The pruned keys' older tokens stay out; so do tokens below the
	// floor for keys never seen (their marks may be the pruned ones).
	wantStale(t, f.Claim(ctx, "sku:a", 99), 100)
	wantStale(t, f.Claim(ctx, "sku:b", 69), 100)
	wantStale(t, f.Claim(ctx, "sku:new", 1), 100)
	if got := rows(t, pool); got != 1 {
		t.Fatalf("refused claims left %d marks, want 1", got)
	}
	// A key with a mark below the floor keeps its own mark.
	if err := f.Claim(ctx, "sku:live", 51); err != nil {
		t.Fatalf("sku:live with its own mark 50 refused 51: %v", err)
	}
	// Tx is held to the floor as well.
	err = k.Tx(ctx, pool, "sku:a", 99, func(pgx.Tx) error { t.Error("fn ran"); return nil })
	wantStale(t, err, 100)
	for _, tok := range []token.Token{100, 101} {
		if err := f.Claim(ctx, "sku:a", tok); err != nil {
			t.Fatalf("pruned sku:a refused %d: %v", tok, err)
		}
	}
	// A second Prune with nothing idle changes nothing.
	if n, err := postgres.Prune(ctx, pool, time.Hour); err != nil || n != 0 {
		t.Fatalf("second Prune = %d, %v", n, err)
	}
	// Reset is the operator's and may go below the floor.
	if prev, err := f.Reset(ctx, "sku:c", 5); err != nil || prev != 100 {
		t.Fatalf("Reset of a key without a mark = %d, %v; want prev = the floor 100", prev, err)
	}
	if err := f.Claim(ctx, "sku:c", 6); err != nil {
		t.Fatalf("sku:c reset to 5 refused 6: %v", err)
	}
	// The reset's exemption ended with it.
	wantStale(t, f.Claim(ctx, "sku:new", 2), 100)
}

// The control: a DELETE of idle marks without a floor lets the token the
// mark refused back in. Prune, on the same history, does not.
func TestPruneNaiveDeleteLetsOldTokenIn(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxFor(t, time.Minute)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	f := postgres.NewFence(pool)
	for _, k := range []string{"sku:naive", "sku:pruned"} {
		if err := f.Claim(ctx, k, 100); err != nil {
			t.Fatal(err)
		}
	}
	age(t, pool, "sku:naive", "sku:pruned")
	exec(t, pool, `DELETE FROM fence_tokens WHERE resource = 'sku:naive'`)
	if err := f.Claim(ctx, "sku:naive", 99); err != nil {
		t.Fatalf("control: after a plain DELETE the stale 99 should get in, got %v", err)
	}
	if n, err := postgres.Prune(ctx, pool, time.Hour); err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v", n, err)
	}
	wantStale(t, f.Claim(ctx, "sku:pruned", 99), 100)
}

// Column mode's tombstones live in fence_tokens too: pruning one must not
// let Upsert re-create the deleted row under an older token.
func TestPruneTombstone(t *testing.T) {
	t.Parallel()
	pool, tb := setup(t)
	ctx := ctxFor(t, time.Minute)
	if err := tb.Upsert(ctx, pool, int64(2), 10, postgres.Set("stock", 3)); err != nil {
		t.Fatal(err)
	}
	if err := tb.Delete(ctx, pool, int64(2), 20); err != nil {
		t.Fatal(err)
	}
	age(t, pool, "items/2")
	if n, err := postgres.Prune(ctx, pool, time.Hour); err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v; want the tombstone", n, err)
	}
	wantStale(t, tb.Upsert(ctx, pool, int64(2), 15, postgres.Set("stock", 9)), 20)
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM items WHERE id = 2`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the stale Upsert re-created the row (%d rows, %v)", n, err)
	}
	// Row 1 (mark 0, no tombstone) is deleted under a token below the
	// floor: its tombstone takes the floor, not the lower token.
	if err := tb.Delete(ctx, pool, int64(1), 5); err != nil {
		t.Fatal(err)
	}
	wantStale(t, tb.Upsert(ctx, pool, int64(1), 6, postgres.Set("stock", 1)), 20)
	if err := tb.Upsert(ctx, pool, int64(2), 21, postgres.Set("stock", 9)); err != nil {
		t.Fatalf("a newer token could not re-create the row: %v", err)
	}
}

// The race: a claim of a key whose statement began before Prune
// committed, and that reaches the key's row while Prune's DELETE holds it.
// When Prune commits, the row is gone, and the claim inserts a new one —
// which the floor's trigger refuses, because the floor rose in the same
// commit. Without the trigger (the control) the older token gets in.
func TestPruneRacingClaim(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		isolation string
		trigger   bool
	}{
		{"read committed", "read committed", true},
		{"repeatable read", "repeatable read", true},
		{"control without the trigger", "read committed", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			pool := newPool(t)
			ctx := ctxFor(t, time.Minute)
			if err := postgres.Migrate(ctx, pool); err != nil {
				t.Fatal(err)
			}
			if !c.trigger {
				exec(t, pool, `DROP TRIGGER fenceguard_floor ON fence_tokens`)
			}
			exec(t, pool, fmt.Sprintf(`ALTER DATABASE %s SET default_transaction_isolation = '%s'`,
				pgx.Identifier{pool.Config().ConnConfig.Database}.Sanitize(), c.isolation))
			pool.Reset() // new sessions, with the isolation
			f := postgres.NewFence(pool)
			if err := f.Claim(ctx, "sku:1", 100); err != nil {
				t.Fatal(err)
			}
			age(t, pool, "sku:1")
			tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			if c.trigger {
				if n, err := postgres.Prune(ctx, tx, time.Hour); err != nil || n != 1 {
					t.Fatalf("Prune = %d, %v", n, err)
				}
			} else { // what Prune does, without the check Prune makes
				if _, err := tx.Exec(ctx, `WITH d AS (DELETE FROM fence_tokens WHERE resource = 'sku:1' RETURNING token)
 UPDATE fence_tokens SET token = (SELECT max(token) FROM d) WHERE resource = ''`); err != nil {
					t.Fatal(err)
				}
			}
			done := make(chan error, 1)
			go func() { done <- f.Claim(ctx, "sku:1", 50) }()
			waitBlocked(t, pool, 1) // the claim waits for the DELETE's row lock
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			err = <-done
			if !c.trigger {
				if err != nil {
					t.Fatalf("control: the older token should have got in without the trigger, got %v", err)
				}
				return
			}
			wantStale(t, err, 100)
			if got := rows(t, pool); got != 0 {
				t.Fatalf("the refused claim left %d marks", got)
			}
		})
	}
}

// Claims racing Prune, which runs with an age of a microsecond — every
// mark not locked is pruned as soon as it is written: no key ever accepts
// a token below one it accepted before.
func TestPruneConcurrentClaims(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxFor(t, 2*time.Minute)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	f := postgres.NewFence(pool)
	stop := make(chan struct{})
	var pruned int64
	var pw sync.WaitGroup
	pw.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, err := postgres.Prune(ctx, pool, time.Microsecond)
			if err != nil {
				t.Error(err)
				return
			}
			pruned += n
		}
	})
	var wg sync.WaitGroup
	var accepted, refused [4]int
	for g := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			high := map[string]token.Token{}
			for i := range 300 {
				k := fmt.Sprintf("g%d:%d", g, r.IntN(8))
				// Tokens grow with time, as lockers' do, with stale
				// ones among them.
				tok := token.Token(1 + 10*i + r.IntN(100))
				err := f.Claim(ctx, k, tok)
				switch {
				case err == nil:
					if tok < high[k] {
						t.Errorf("%s accepted %d after %d", k, tok, high[k])
					}
					high[k] = max(high[k], tok)
					accepted[g]++
				case errors.Is(err, token.ErrStale):
					refused[g]++
				default:
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	pw.Wait()
	t.Logf("accepted %v, refused %v, pruned %d marks", accepted, refused, pruned)
	if pruned == 0 {
		t.Fatal("Prune deleted nothing: the test raced nothing")
	}
}

// Prune refuses a table without the floor's trigger: deleting marks there
// would not be safe.
func TestPruneNeedsMigrate(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxFor(t, time.Minute)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, `DROP TRIGGER fenceguard_floor ON fence_tokens`, `DELETE FROM fence_tokens WHERE resource = ''`,
		`INSERT INTO fence_tokens (resource, token, updated_at) VALUES ('sku:1', 5, now() - interval '2 days')`)
	if _, err := postgres.Prune(ctx, pool, time.Hour); !errors.Is(err, postgres.ErrSchema) || !strings.Contains(err.Error(), "run postgres.Migrate") {
		t.Fatalf("Prune without the trigger: %v, want a SchemaError saying to run postgres.Migrate", err)
	}
	if got := rows(t, pool); got != 1 {
		t.Fatalf("%d marks left, want 1", got)
	}
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if n, err := postgres.Prune(ctx, pool, time.Hour); err != nil || n != 1 {
		t.Fatalf("Prune after Migrate = %d, %v", n, err)
	}
	if _, err := postgres.Prune(ctx, pool, 0); !errors.Is(err, postgres.ErrBadInput) {
		t.Fatalf("Prune(0) = %v, want ErrBadInput", err)
	}
}
