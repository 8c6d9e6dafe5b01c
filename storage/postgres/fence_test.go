package postgres_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

func TestFenceClaim(t *testing.T) {
	pool, _ := setup(t)
	ctx := ctxFor(t, time.Minute)
	f := postgres.NewFence(pool)
	steps := []struct {
		tok   token.Token
		stale bool
		high  token.Token
	}{
		{5, false, 5},
		{5, false, 5}, // the same holder, a second access
		{4, true, 5},  // an older holder
		{9, false, 9}, // a newer holder claims
		{5, true, 9},
		{8, true, 9},
		{9, false, 9},
	}
	for i, s := range steps {
		err := f.Claim(ctx, "k", s.tok)
		switch {
		case s.stale:
			stale(t, err, s.tok, s.high)
		case err != nil:
			t.Fatalf("step %d: Claim(%d) = %v, want accepted", i, s.tok, err)
		}
		if got, err := f.HighWater(ctx, "k"); err != nil || got != s.high {
			t.Fatalf("step %d: high-water %d, %v; want %d", i, got, err, s.high)
		}
	}
	if got, err := f.HighWater(ctx, "other"); err != nil || got != 0 {
		t.Fatalf("unclaimed key: high-water %d, %v", got, err)
	}
}

// Concurrent claims on a few resources: a refusal always reports a mark
// above the presented token, and every mark ends at the largest token
// presented for it.
func TestFenceConcurrent(t *testing.T) {
	pool, _ := setup(t)
	ctx := ctxFor(t, 2*time.Minute)
	f := postgres.NewFence(pool)
	const workers, perWorker, keys = 16, 50, 3
	var (
		mu      sync.Mutex
		maxSeen = map[string]token.Token{}
		wg      sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for i := range perWorker {
				k := fmt.Sprint("sku:", rand.N(keys))
				tok := token.Token(1 + i*2 + rand.N(20))
				err := f.Claim(ctx, k, tok)
				var se *token.StaleError
				switch {
				case err == nil:
				case errors.As(err, &se):
					if se.Current <= tok || se.Presented != tok || se.Resource != k {
						t.Errorf("Claim(%s, %d): StaleError %+v", k, tok, se)
					}
				default:
					t.Errorf("Claim(%s, %d): %v", k, tok, err)
				}
				mu.Lock()
				maxSeen[k] = max(maxSeen[k], tok)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for k, want := range maxSeen {
		if got, err := f.HighWater(ctx, k); err != nil || got != want {
			t.Errorf("%s: high-water %d, %v; want the largest presented %d", k, got, err, want)
		}
	}
}

// A Fence on a high-water table of another name.
func TestFenceOtherTable(t *testing.T) {
	pool := newPool(t)
	ctx := ctxFor(t, time.Minute)
	marks, err := postgres.NewTokens(postgres.TokensOptions{Name: []string{"fencing", "marks"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := marks.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	f := marks.Fence(pool)
	if err := f.Claim(ctx, "r", 3); err != nil {
		t.Fatal(err)
	}
	stale(t, f.Claim(ctx, "r", 2), 2, 3)
	if hw, err := marks.HighWater(ctx, pool, "r"); err != nil || hw != 3 {
		t.Fatalf("HighWater = %d, %v", hw, err)
	}
	// The default table does not exist here.
	if err := postgres.NewFence(pool).Claim(ctx, "r", 4); !errors.Is(err, postgres.ErrSchema) {
		t.Fatalf("Claim without fence_tokens = %v, want ErrSchema", err)
	}
}
