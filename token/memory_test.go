package token_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/fenceguard/fenceguard/token"
)

// The contract of Fence is checked by token/fencetest (its own tests run it
// on MemoryFence); these are what is particular to MemoryFence.

// Refused input adds no entry (fencetest checks that it moves no mark).
func TestMemoryFenceBadInputAddsNoEntry(t *testing.T) {
	ctx := context.Background()
	var f token.MemoryFence
	if err := f.Claim(ctx, "k", 10); err != nil {
		t.Fatal(err)
	}
	_ = f.Claim(ctx, "fresh", 0)
	_ = f.Claim(ctx, "", 11)
	if f.Len() != 1 {
		t.Errorf("bad input added entries: Len = %d", f.Len())
	}
}

// Many goroutines race to claim the same keys with random tokens. For every
// key, the accepted tokens in claim order must never decrease and the final
// high-water must be the largest token presented.
func TestMemoryFenceConcurrent(t *testing.T) {
	ctx := context.Background()
	var f token.MemoryFence
	const workers, perWorker, keys = 16, 2000, 8
	var mu sync.Mutex
	maxPresented := map[string]token.Token{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			local := map[string]token.Token{}
			for i := range perWorker {
				k := fmt.Sprint("sku:", (w+i)%keys)
				tok := token.Token(1 + (w*7919+i*104729)%100000)
				err := f.Claim(ctx, k, tok)
				var se *token.StaleError
				switch {
				case err == nil:
				case errors.As(err, &se):
					if se.Current <= tok {
						t.Errorf("refused %d with current %d", tok, se.Current)
					}
				default:
					t.Errorf("Claim: %v", err)
				}
				local[k] = max(local[k], tok)
			}
			mu.Lock()
			for k, v := range local {
				maxPresented[k] = max(maxPresented[k], v)
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	for k, want := range maxPresented {
		if got := f.HighWater(k); got != want {
			t.Errorf("%s: high-water %d, want the largest presented %d", k, got, want)
		}
	}
}

func TestMemoryFencePrune(t *testing.T) {
	ctx := context.Background()
	var f token.MemoryFence
	for i := range 1000 {
		if err := f.Claim(ctx, fmt.Sprint("idle:", i), token.Token(100+i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.Prune(); n != 0 {
		t.Fatalf("first Prune removed %d keys claimed since creation", n)
	}
	if err := f.Claim(ctx, "busy", 5000); err != nil {
		t.Fatal(err)
	}
	if n := f.Prune(); n != 1000 {
		t.Fatalf("second Prune removed %d keys, want the 1000 idle ones", n)
	}
	if f.Len() != 1 {
		t.Fatalf("Len = %d after pruning, want 1", f.Len())
	}
	// A pruned key still refuses what it refused before: its shard's floor
	// is at least its old high-water.
	for i := range 1000 {
		k := fmt.Sprint("idle:", i)
		err := f.Claim(ctx, k, token.Token(99+i))
		if !errors.Is(err, token.ErrStale) {
			t.Fatalf("pruned %s accepted %d, below its old high-water %d", k, 99+i, 100+i)
		}
	}
	// And newer tokens are accepted.
	if err := f.Claim(ctx, "idle:0", 2000); err != nil {
		t.Fatalf("pruned key refused a newer token: %v", err)
	}
}

func TestContext(t *testing.T) {
	ctx := context.Background()
	if k, tok, ok := token.FromContext(ctx); ok || k != "" || tok != 0 {
		t.Fatalf("empty context carries %q %d", k, tok)
	}
	ctx = token.NewContext(ctx, "sku:1", 17)
	if k, tok, ok := token.FromContext(ctx); !ok || k != "sku:1" || tok != 17 {
		t.Fatalf("FromContext = %q %d %v", k, tok, ok)
	}
	inner := token.NewContext(ctx, "sku:2", 18)
	if k, tok, _ := token.FromContext(inner); k != "sku:2" || tok != 18 {
		t.Fatalf("inner FromContext = %q %d", k, tok)
	}
}

func BenchmarkMemoryFenceClaimParallel(b *testing.B) {
	ctx := context.Background()
	var f token.MemoryFence
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprint("sku:", i)
	}
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			_ = f.Claim(ctx, keys[i%len(keys)], token.Token(i))
		}
	})
}

func BenchmarkParse(b *testing.B) {
	for b.Loop() {
		_, _ = token.Parse("1732870000123456")
	}
}
