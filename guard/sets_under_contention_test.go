package guard_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/token"
)

// Many callers taking overlapping sets of keys, named in any order and
// with repetitions, and single keys among them, all finish: nobody holds a
// key another holds, and every key's tokens grow from grant to grant.
func TestOverlappingSetsInAnyOrderNeverDeadlock(t *testing.T) {
	l := memlock.New()
	g := newGuard(t, l, guard.Options{TTL: 10 * time.Second})
	ctx := testCtx(t)
	keys := []string{"a", "b", "c", "d", "e"}
	inUse := map[string]*atomic.Int32{}
	for _, k := range keys {
		inUse[k] = new(atomic.Int32)
	}
	var mu sync.Mutex
	last := map[string]token.Token{}
	check := func(tokens map[string]token.Token) {
		mu.Lock()
		defer mu.Unlock()
		for k, tok := range tokens {
			if tok <= last[k] {
				t.Errorf("%q: token %d after %d", k, tok, last[k])
			}
			last[k] = tok
		}
	}
	var sections atomic.Int64
	stop := time.Now().Add(1500 * time.Millisecond)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 11))
			for time.Now().Before(stop) && !t.Failed() {
				var set []string
				for range 1 + r.IntN(5) {
					set = append(set, keys[r.IntN(len(keys))])
				}
				dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err := g.DoAll(dctx, set, func(_ context.Context, tokens map[string]token.Token) error {
					for k := range tokens {
						if n := inUse[k].Add(1); n != 1 {
							t.Errorf("%q held %d times at once", k, n)
						}
					}
					check(tokens)
					time.Sleep(time.Duration(r.IntN(300)) * time.Microsecond)
					for k := range tokens {
						inUse[k].Add(-1)
					}
					return nil
				})
				cancel()
				if err != nil {
					t.Errorf("DoAll %q: %v", set, err)
					return
				}
				sections.Add(1)
			}
		})
	}
	wg.Wait()
	for _, k := range keys {
		assertFree(t, l, k)
	}
	t.Logf("%d sections", sections.Load())
}

// An AcquireAll cut short at a random point — waiting for a key, between
// two keys, right at a grant — leaves none of its keys held or waited
// for.
func TestAcquireAllCutShortLeavesNothingHeldOrQueued(t *testing.T) {
	l := memlock.New()
	g := newGuard(t, l, guard.Options{TTL: 10 * time.Second})
	ctx := testCtx(t)
	keys := []string{"a", "b", "c", "d"}
	r := rand.New(rand.NewPCG(3, 4))
	got := 0
	for round := range 1500 {
		busy, err := l.TryAcquire(ctx, keys[r.IntN(len(keys))], time.Second)
		if err != nil {
			t.Fatal(err)
		}
		hold := time.Duration(r.IntN(300)) * time.Microsecond
		released := make(chan struct{})
		go func() {
			defer close(released)
			time.Sleep(hold)
			_ = busy.Release(ctx)
		}()
		actx, cancel := context.WithTimeout(ctx, time.Duration(r.IntN(400))*time.Microsecond)
		set := append([]string(nil), keys...)
		r.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
		s, err := g.AcquireAll(actx, set...)
		cancel()
		if err == nil {
			got++
			if err := s.Release(ctx); err != nil {
				t.Fatal(err)
			}
		} else if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("round %d: %v", round, err)
		}
		<-released
		// What a cut-short AcquireAll gives back goes in the background
		// once its context has ended: wait a little for it.
		deadline := time.Now().Add(3 * time.Second)
		for _, k := range keys {
			for {
				lease, err := l.TryAcquire(ctx, k, time.Second)
				if err == nil {
					_ = lease.Release(ctx)
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("round %d (AcquireAll: %v): %q still held or waited for: %v", round, err, k, err)
				}
				time.Sleep(100 * time.Microsecond)
			}
		}
	}
	t.Logf("%d of 1500 acquired", got)
}

// DoAll nested in Do takes the enclosing key as a nested hold, with its
// token, and gives back only what it took; Do nested in DoAll does the
// same for one key of the set, and a nested DoAll over the set's own keys
// takes nothing at all.
func TestDoAllAndDoNestInEachOther(t *testing.T) {
	l := memlock.New()
	g := newGuard(t, l, guard.Options{TTL: 10 * time.Second})
	ctx := testCtx(t)
	err := g.Do(ctx, "a", func(ctx context.Context, ta token.Token) error {
		err := g.DoAll(ctx, []string{"c", "a", "b"}, func(ctx context.Context, tokens map[string]token.Token) error {
			if tokens["a"] != ta {
				t.Errorf("nested a: token %d, want the enclosing %d", tokens["a"], ta)
			}
			for _, k := range []string{"a", "b", "c"} {
				if tok, ok := token.Lookup(ctx, k); !ok || tok != tokens[k] {
					t.Errorf("Lookup(%q) = %d, %v; want %d", k, tok, ok, tokens[k])
				}
				assertHeld(t, l, k)
			}
			return g.DoAll(ctx, []string{"b", "a"}, func(ctx context.Context, inner map[string]token.Token) error {
				if inner["a"] != tokens["a"] || inner["b"] != tokens["b"] {
					t.Errorf("re-entered set: tokens %v, want %v", inner, tokens)
				}
				return nil
			})
		})
		if err != nil {
			return err
		}
		assertHeld(t, l, "a")
		assertFree(t, l, "b")
		assertFree(t, l, "c")
		if tok, _ := token.Lookup(ctx, "a"); tok != ta {
			t.Errorf("a's token in Do's context is now %d, want %d", tok, ta)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	assertFree(t, l, "a")

	err = g.DoAll(ctx, []string{"x", "y"}, func(ctx context.Context, tokens map[string]token.Token) error {
		err := g.Do(ctx, "y", func(ctx context.Context, ty token.Token) error {
			if ty != tokens["y"] {
				t.Errorf("nested y: token %d, want the set's %d", ty, tokens["y"])
			}
			return g.Do(ctx, "z", func(ctx context.Context, tz token.Token) error {
				for k, want := range map[string]token.Token{"x": tokens["x"], "y": ty, "z": tz} {
					if tok, ok := token.Lookup(ctx, k); !ok || tok != want {
						t.Errorf("Lookup(%q) inside = %d, %v; want %d", k, tok, ok, want)
					}
				}
				return nil
			})
		})
		if err != nil {
			return err
		}
		assertHeld(t, l, "x")
		assertHeld(t, l, "y")
		assertFree(t, l, "z")
		s, err := g.TryAcquireAll(ctx, "y", "x")
		if err != nil {
			return err
		}
		if s.Token("x") != tokens["x"] || s.Token("y") != tokens["y"] {
			t.Errorf("nested TryAcquireAll: %v, want %v", s.Tokens(), tokens)
		}
		if err := s.Release(ctx); err != nil {
			return err
		}
		assertHeld(t, l, "x")
		assertHeld(t, l, "y")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"x", "y", "z"} {
		assertFree(t, l, k)
	}
}

// A lease of a DoAll broken while fn runs cancels fn's context, with a
// cause naming that key; DoAll reports the loss and gives back the
// others.
func TestDoAllContextNamesTheBrokenKey(t *testing.T) {
	l := memlock.New()
	g := newGuard(t, l, guard.Options{TTL: 10 * time.Second})
	ctx := testCtx(t)
	err := g.DoAll(ctx, []string{"p", "q", "r"}, func(ctx context.Context, _ map[string]token.Token) error {
		if !l.Break("q") {
			t.Fatal("q not held")
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("fn's context not cancelled 5s after q was broken")
		}
		cause := context.Cause(ctx)
		if !errors.Is(cause, guard.ErrLost) || !strings.Contains(cause.Error(), `"q"`) {
			t.Errorf("cause %v: want ErrLost naming q", cause)
		}
		return nil
	})
	if !errors.Is(err, guard.ErrLost) {
		t.Errorf("DoAll: %v, want ErrLost", err)
	}
	for _, k := range []string{"p", "q", "r"} {
		assertFree(t, l, k)
	}
}

// TryAcquireAll meeting a held key names it and keeps none of the others.
func TestTryAcquireAllRefusedKeepsNothing(t *testing.T) {
	l := memlock.New()
	g := newGuard(t, l, guard.Options{TTL: 10 * time.Second})
	ctx := testCtx(t)
	h, err := l.TryAcquire(ctx, "m", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.TryAcquireAll(ctx, "z", "m", "a")
	if !errors.Is(err, locks.ErrNotObtained) || !strings.Contains(err.Error(), `"m"`) {
		t.Fatalf("TryAcquireAll with m held: %v, want ErrNotObtained naming m", err)
	}
	assertFree(t, l, "a")
	assertFree(t, l, "z")
	_ = h.Release(ctx)
}
