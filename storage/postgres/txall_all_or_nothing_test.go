package postgres_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// A TxAll with one stale member, wherever it sorts, moves no mark of the
// others and does not run fn (or, claiming with fn's first statement,
// commits nothing of it).
func TestTxAllStaleMemberMovesNoMark(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxFor(t, 30*time.Second)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, "create table side (note text)")
	base := token.Token(time.Now().UnixMicro())
	for _, first := range []bool{false, true} {
		k, err := postgres.NewTokens(postgres.TokensOptions{ClaimWithFirstStatement: first})
		if err != nil {
			t.Fatal(err)
		}
		for i, staleKey := range []string{"a", "b", "c"} {
			p := fmt.Sprintf("%v-%d-", first, i)
			claims := map[string]token.Token{p + "a": base + 10, p + "b": base + 10, p + "c": base + 10}
			if err := k.Tx(ctx, pool, p+staleKey, base+20, func(pgx.Tx) error { return nil }); err != nil {
				t.Fatal(err)
			}
			ran := false
			err := k.TxAll(ctx, pool, claims, func(tx pgx.Tx) error {
				ran = true
				_, err := tx.Exec(ctx, "insert into side values ($1)", p)
				return err
			})
			var se *token.StaleError
			if !errors.As(err, &se) || se.Resource != p+staleKey || se.Current != base+20 {
				t.Fatalf("%s: TxAll with %s stale: %v, want a StaleError of it at %d", p, staleKey, err, base+20)
			}
			if ran && !first {
				t.Errorf("%s: fn ran though %s was stale", p, staleKey)
			}
			for r := range claims {
				want := token.Token(0)
				if r == p+staleKey {
					want = base + 20
				}
				if got := highWater(t, pool, r); got != want {
					t.Errorf("%s: mark of %s is %d after the refused TxAll, want %d", p, r, got, want)
				}
			}
			var n int
			if err := pool.QueryRow(ctx, "select count(*) from side where note = $1", p).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Errorf("%s: fn's insert committed though %s was stale", p, staleKey)
			}
		}
	}
}

// Fenced transactions over overlapping sets of resources, named in any
// order, from many goroutines at once, and single-resource ones among
// them, never deadlock: each waits for the other.
func TestTxAllOverlappingSetsNeverDeadlock(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxFor(t, time.Minute)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	res := []string{"r1", "r2", "r3", "r4"}
	var next atomic.Int64
	next.Store(time.Now().UnixMicro())
	stop := time.Now().Add(3 * time.Second)
	var commits, stale, deadlocks atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 3))
			for time.Now().Before(stop) && !t.Failed() {
				claims := map[string]token.Token{}
				for len(claims) < 2+r.IntN(3) {
					claims[res[r.IntN(len(res))]] = token.Token(next.Add(1))
				}
				var err error
				if w == 0 {
					for k, v := range claims {
						err = postgres.Tx(ctx, pool, k, v, func(tx pgx.Tx) error {
							time.Sleep(time.Millisecond)
							return nil
						})
						break
					}
				} else {
					err = postgres.TxAll(ctx, pool, claims, func(tx pgx.Tx) error {
						time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
						return nil
					})
				}
				var pe *pgconn.PgError
				var se *token.StaleError
				switch {
				case err == nil:
					commits.Add(1)
				case errors.As(err, &se):
					stale.Add(1)
				case errors.As(err, &pe) && pe.Code == "40P01":
					deadlocks.Add(1)
					t.Errorf("deadlock: %v", err)
				default:
					t.Errorf("TxAll %v: %v", claims, err)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d commits, %d stale, %d deadlocks", commits.Load(), stale.Load(), deadlocks.Load())
	if commits.Load() < 20 {
		t.Errorf("only %d commits", commits.Load())
	}
}

// From a context carrying several keys' tokens, each zero token of a
// TxAll is the token of its own resource; a resource the context holds no
// token for, or a forged token, refuses the whole set before anything is
// written.
func TestTxAllResolvesEachResourceFromAMultiKeyContext(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxFor(t, 30*time.Second)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	base := token.Token(time.Now().UnixMicro())
	held := token.NewContext(token.NewContext(token.NewContext(ctx, "x", base+1), "y", base+7), "z", base+3)
	if err := postgres.TxAll(held, pool, map[string]token.Token{"x": 0, "y": 0, "z": 0}, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for r, want := range map[string]token.Token{"x": base + 1, "y": base + 7, "z": base + 3} {
		if got := highWater(t, pool, r); got != want {
			t.Errorf("mark of %s: %d, want its own token %d", r, got, want)
		}
	}
	// w is not held: the set is refused as missing, x does not move.
	held2 := token.NewContext(held, "x", base+9)
	err := postgres.TxAll(held2, pool, map[string]token.Token{"x": 0, "w": 0}, func(pgx.Tx) error {
		t.Error("fn ran")
		return nil
	})
	if !errors.Is(err, token.ErrMissing) || !strings.Contains(err.Error(), `"w"`) {
		t.Errorf("TxAll with w not held: %v, want ErrMissing naming w", err)
	}
	if got := highWater(t, pool, "x"); got != base+1 {
		t.Errorf("x moved to %d by a refused set", got)
	}
	// A forged token refuses the set: x's honest claim is not written.
	forged := token.Token(time.Now().Add(24 * time.Hour).UnixMicro())
	err = postgres.TxAll(held2, pool, map[string]token.Token{"x": 0, "y": forged}, func(pgx.Tx) error {
		t.Error("fn ran")
		return nil
	})
	var fe *token.ForgedError
	if !errors.As(err, &fe) {
		t.Errorf("TxAll with a forged token: %v, want a ForgedError", err)
	}
	if got := highWater(t, pool, "x"); got != base+1 {
		t.Errorf("x moved to %d by a refused set", got)
	}
	if got := highWater(t, pool, "y"); got != base+7 {
		t.Errorf("y moved to %d by a forged token", got)
	}
}

// A pruned mark still refuses its old holder inside a set: the floor
// stands for it, and the set's other members do not move.
func TestTxAllRefusesATokenBelowAPrunedMark(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxFor(t, 30*time.Second)
	k, err := postgres.NewTokens(postgres.TokensOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	base := token.Token(time.Now().UnixMicro())
	if err := k.Tx(ctx, pool, "old", base+20, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if n, err := k.Prune(ctx, pool, time.Millisecond); err != nil || n != 1 {
		t.Fatalf("Prune: %d, %v; want 1 mark deleted", n, err)
	}
	err = k.TxAll(ctx, pool, map[string]token.Token{"old": base + 10, "new": base + 30}, func(pgx.Tx) error {
		t.Error("fn ran")
		return nil
	})
	var se *token.StaleError
	if !errors.As(err, &se) || se.Resource != "old" || se.Current < base+20 {
		t.Fatalf("TxAll under a pruned mark: %v, want a StaleError of old at %d or above", err, base+20)
	}
	if got := highWater(t, pool, "new"); got != base+20 {
		t.Errorf("new: high-water %d, want the floor %d (no mark of its own)", got, base+20)
	}
	var rows int
	if err := pool.QueryRow(ctx, "select count(*) from fence_tokens where resource <> ''").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Errorf("%d marks written by a refused set", rows)
	}
	// A member below the floor refuses the set too, whatever its own
	// history.
	err = k.TxAll(ctx, pool, map[string]token.Token{"fresh": base + 5, "new": base + 30}, func(pgx.Tx) error {
		t.Error("fn ran")
		return nil
	})
	if !errors.As(err, &se) || se.Resource != "fresh" {
		t.Fatalf("TxAll with a member below the floor: %v, want a StaleError of fresh", err)
	}
}
