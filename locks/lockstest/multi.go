package lockstest

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/token"
)

// The multi-key cases run [guard.Guard.DoAll] and [guard.Guard.AcquireAll]
// over the locker: the guard orders the keys, the backend must keep each
// key's exclusion and tokens while other keys are held and waited for by
// the same process.

func (s *suite) guard(t *testing.T, l locks.Locker) *guard.Guard {
	t.Helper()
	g, err := guard.New(l, guard.Options{TTL: s.cfg.LongTTL, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// multiNoDeadlock: workers lock overlapping sets of keys, each set named in
// a random order, for MultiRounds critical sections in all. With the keys
// taken in one order no round can deadlock: each must finish within a
// bound, and no key may have two holders at once.
func (s *suite) multiNoDeadlock(t *testing.T) {
	l := s.locker(t)
	g := s.guard(t, l)
	keys := make([]string, 5)
	for i := range keys {
		keys[i] = key(t, string(rune('a'+i)))
	}
	const workers = 8
	var mu sync.Mutex
	inside := map[string]int{}
	last := map[string]token.Token{}
	enter := func(tokens map[string]token.Token) {
		mu.Lock()
		defer mu.Unlock()
		for k, tok := range tokens {
			if inside[k]++; inside[k] != 1 {
				t.Errorf("%d holders of %q at once", inside[k], k)
			}
			if tok <= last[k] {
				t.Errorf("%q granted token %d after %d", k, tok, last[k])
			}
			last[k] = tok
		}
	}
	leave := func(tokens map[string]token.Token) {
		mu.Lock()
		defer mu.Unlock()
		for k := range tokens {
			inside[k]--
		}
	}
	rounds := make(chan struct{}, s.cfg.MultiRounds)
	for range s.cfg.MultiRounds {
		rounds <- struct{}{}
	}
	close(rounds)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range rounds {
				set := rand.Perm(len(keys))[:2+rand.IntN(2)]
				ask := make([]string, len(set))
				for i, j := range set {
					ask[i] = keys[j]
				}
				ctx, cancel := context.WithTimeout(context.Background(), RoundBound)
				err := g.DoAll(ctx, ask, func(_ context.Context, tokens map[string]token.Token) error {
					if len(tokens) != len(ask) {
						t.Errorf("DoAll(%q) gave tokens %v", ask, tokens)
					}
					enter(tokens)
					if rand.IntN(4) == 0 {
						time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
					}
					leave(tokens)
					return nil
				})
				cancel()
				if err != nil {
					t.Errorf("DoAll(%q) (a deadlock if it timed out): %v", ask, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// multiPartialLeavesNothing: an AcquireAll cut short on its second key —
// by its context while it waits, and by TryAcquireAll finding the key held
// — gives back the first, and leaves no waiter on the second: once that
// key is released, a try-acquire takes it at once.
func (s *suite) multiPartialLeavesNothing(t *testing.T) {
	l := s.locker(t)
	g := s.guard(t, l)
	a, b, c := key(t, "a"), key(t, "b"), key(t, "c")
	other := mustAcquire(t, ctxFor(t, time.Minute), l, b, s.cfg.LongTTL)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := g.AcquireAll(ctx, c, b, a)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), b) {
		t.Errorf("AcquireAll with %q held: %v, want the context's deadline naming it", b, err)
	}
	_, err = g.TryAcquireAll(ctxFor(t, time.Minute), a, b, c)
	if !errors.Is(err, locks.ErrNotObtained) || !strings.Contains(err.Error(), b) {
		t.Errorf("TryAcquireAll with %q held: %v, want ErrNotObtained naming it", b, err)
	}
	if err := other.Release(ctxFor(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	// The releases of what was taken may finish just after the calls
	// return (the guard releases in the background once the context is
	// done): allow them WakeBound.
	for _, k := range []string{a, b, c} {
		deadline := time.Now().Add(WakeBound)
		for {
			lease, err := l.TryAcquire(ctxFor(t, time.Minute), k, s.cfg.LongTTL)
			if err == nil {
				_ = lease.Release(ctxFor(t, time.Minute))
				break
			}
			if !errors.Is(err, locks.ErrNotObtained) || time.Now().After(deadline) {
				t.Errorf("%q after the cut-short acquires: %v", k, err)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// multiTokensPerKey: each key of a set gets a token of its own grant, and
// a set's tokens carry on each key's own sequence.
func (s *suite) multiTokensPerKey(t *testing.T) {
	l := s.locker(t)
	g := s.guard(t, l)
	a, b := key(t, "a"), key(t, "b")
	ctx := ctxFor(t, time.Minute)
	lease := mustAcquire(t, ctx, l, a, s.cfg.LongTTL)
	ta := lease.Token()
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	set, err := g.AcquireAll(ctx, b, a)
	if err != nil {
		t.Fatal(err)
	}
	if got := set.Token(a); got <= ta {
		t.Errorf("%q in a set: token %d, not above its last grant's %d", a, got, ta)
	}
	for _, k := range []string{a, b} {
		if got, ok := token.Lookup(set.Context(), k); !ok || got != set.Token(k) {
			t.Errorf("the set's context carries %d for %q, want %d", got, k, set.Token(k))
		}
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lease = mustAcquire(t, ctx, l, b, s.cfg.LongTTL)
	if lease.Token() <= set.Token(b) {
		t.Errorf("%q after the set: token %d, not above the set's %d", b, lease.Token(), set.Token(b))
	}
	_ = lease.Release(ctx)
}
