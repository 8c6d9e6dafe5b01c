package token_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

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

// A client naming a new key with every request (issue 18: random SKUs)
// grows the fence only up to the keys of the last two prune periods, and
// the heap stops growing with it, whatever the number of keys ever named.
func TestMemoryFencePruneBoundsManyKeys(t *testing.T) {
	ctx := context.Background()
	var f token.MemoryFence
	const perPeriod, periods = 10_000, 20 // 200,000 distinct keys
	var heap []uint64
	maxLen := 0
	for p := range periods {
		for i := range perPeriod {
			k := fmt.Sprintf("sku:random-%d-%d", p, i)
			if err := f.Claim(ctx, k, token.Token(1+p*perPeriod+i)); err != nil {
				t.Fatal(err)
			}
		}
		maxLen = max(maxLen, f.Len())
		f.Prune()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heap = append(heap, ms.HeapAlloc)
	}
	if maxLen > 2*perPeriod {
		t.Fatalf("the fence held %d keys at most, want at most %d (two periods' worth)", maxLen, 2*perPeriod)
	}
	// After the maps have reached their working size (a few periods), the
	// heap must not grow with the keys named: allow 50% noise.
	if early, late := heap[4], heap[periods-1]; late > early*3/2 {
		t.Fatalf("heap grew from %d to %d bytes while the keys held stayed bounded", early, late)
	}
	t.Logf("%d distinct keys: at most %d held; heap after period 5 %d KiB, after period %d %d KiB",
		perPeriod*periods, maxLen, heap[4]>>10, periods, heap[periods-1]>>10)
	// Every pruned key still refuses the token it last accepted minus one.
	for _, k := range []int{0, perPeriod - 1, 7*perPeriod + 3} {
		key := fmt.Sprintf("sku:random-%d-%d", k/perPeriod, k%perPeriod)
		if err := f.Claim(ctx, key, token.Token(k)); k > 0 && !errors.Is(err, token.ErrStale) {
			t.Fatalf("pruned %s accepted %d, below its old mark %d: %v", key, k, k+1, err)
		}
	}
}

// Claims racing Prune: no key ever accepts a token below one it accepted
// before, however its entry comes and goes.
func TestMemoryFencePruneRacingClaims(t *testing.T) {
	ctx := context.Background()
	var f token.MemoryFence
	const keys, rounds = 64, 2000
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		high = map[string]token.Token{}
		bad  []string
	)
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				f.Prune()
			}
		}
	}()
	var claimers sync.WaitGroup
	for g := range 4 {
		claimers.Add(1)
		go func() {
			defer claimers.Done()
			for i := range rounds {
				k := fmt.Sprint("k", (i*7+g)%keys)
				// Tokens go up and down: the fence must refuse each one
				// below the highest accepted so far for k.
				tok := token.Token(1 + (i*31+g*17)%500)
				mu.Lock()
				err := f.Claim(ctx, k, tok)
				if err == nil {
					if tok < high[k] {
						bad = append(bad, fmt.Sprintf("%s accepted %d after %d", k, tok, high[k]))
					}
					high[k] = max(high[k], tok)
				}
				mu.Unlock()
			}
		}()
	}
	claimers.Wait()
	close(stop)
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d older tokens got back in, e.g. %s", len(bad), bad[0])
	}
}

func TestMemoryFencePruneEvery(t *testing.T) {
	var f token.MemoryFence
	ctx, cancel := context.WithCancel(context.Background())
	if err := f.Claim(ctx, "idle", 7); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- f.PruneEvery(ctx, 5*time.Millisecond) }()
	deadline := time.Now().Add(5 * time.Second)
	for f.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("PruneEvery did not prune an idle key within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if hw := f.HighWater("idle"); hw != 7 {
		t.Fatalf("HighWater of the pruned key = %d, want its floor 7", hw)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("PruneEvery returned %v, want context.Canceled", err)
	}
}
