// Package fencetest is the behavioural suite every [token.Fence] runs
// against its real store, written once: each backend's tests call [Run]
// with a constructor, the way locks/lockstest serves lockers.
//
// It checks the contract of [token.Fence]: a token not below the key's
// high-water is accepted and becomes it; a lower one is refused with a
// [*token.StaleError] carrying the resource, the presented token and the
// current high-water; the zero token and the empty key are refused with
// [token.ErrMissing] and [token.ErrNoResource] and move nothing; tokens up
// to the largest the store holds (all of uint64 unless it says otherwise)
// compare exactly; and under concurrent claims a
// refusal always reports a mark above the presented token and every mark
// ends at the largest token presented for it.
package fencetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/token"
)

// Subject is a Fence under test and a way to read its marks.
type Subject struct {
	Fence token.Fence
	// HighWater returns the mark of resource, 0 when it has none.
	HighWater func(ctx context.Context, resource string) (token.Token, error)
	// MaxToken is the largest token the store holds, when it holds fewer
	// than all of uint64 (PostgreSQL's bigint: math.MaxInt64). Zero means
	// math.MaxUint64. A larger token must be refused with an error and
	// move nothing.
	MaxToken token.Token
}

// Run runs the suite. newFence is called once per subtest, with that
// subtest's t, and must return a fence whose marks no other subtest sees
// (a fresh store, or its own key prefix).
func Run(t *testing.T, newFence func(t *testing.T) Subject) {
	t.Run("Claim", func(t *testing.T) { testClaim(t, newFence(t)) })
	t.Run("Extremes", func(t *testing.T) { testExtremes(t, newFence(t)) })
	t.Run("BadInput", func(t *testing.T) { testBadInput(t, newFence(t)) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, newFence(t)) })
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func highWater(ctx context.Context, t *testing.T, s Subject, resource string) token.Token {
	t.Helper()
	hw, err := s.HighWater(ctx, resource)
	if err != nil {
		t.Fatalf("HighWater(%q): %v", resource, err)
	}
	return hw
}

// stale checks that err is a StaleError for (resource, presented) with
// current as the mark.
func stale(t *testing.T, err error, resource string, presented, current token.Token) {
	t.Helper()
	var se *token.StaleError
	if !errors.As(err, &se) || !errors.Is(err, token.ErrStale) {
		t.Fatalf("Claim(%q, %d) = %v, want a StaleError", resource, presented, err)
	}
	if se.Resource != resource || se.Presented != presented || se.Current != current {
		t.Fatalf("Claim(%q, %d): StaleError %+v, want current %d", resource, presented, se, current)
	}
}

func testClaim(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	for i, step := range []struct {
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
	} {
		err := s.Fence.Claim(ctx, "k", step.tok)
		switch {
		case step.stale:
			stale(t, err, "k", step.tok, step.high)
		case err != nil:
			t.Fatalf("step %d: Claim(%d) = %v, want accepted", i, step.tok, err)
		}
		if got := highWater(ctx, t, s, "k"); got != step.high {
			t.Fatalf("step %d: high-water %d, want %d", i, got, step.high)
		}
	}
	if got := highWater(ctx, t, s, "other"); got != 0 {
		t.Errorf("unclaimed key has high-water %d", got)
	}
}

// Tokens at the top of the range compare exactly (a store that went through
// float64, or a signed type, would not); a store with a smaller range
// refuses what it cannot hold.
func testExtremes(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	top := s.MaxToken
	if top == 0 {
		top = math.MaxUint64
	}
	if err := s.Fence.Claim(ctx, "r", 1<<53+1); err != nil {
		t.Fatalf("Claim(2^53+1): %v", err)
	}
	stale(t, s.Fence.Claim(ctx, "r", 1<<53), "r", 1<<53, 1<<53+1)
	if err := s.Fence.Claim(ctx, "r", top); err != nil {
		t.Fatalf("Claim(%d), the largest token: %v", top, err)
	}
	stale(t, s.Fence.Claim(ctx, "r", top-1), "r", top-1, top)
	if got := highWater(ctx, t, s, "r"); got != top {
		t.Fatalf("high-water %d, want %d", got, top)
	}
	if top < math.MaxUint64 {
		if err := s.Fence.Claim(ctx, "beyond", top+1); err == nil || errors.Is(err, token.ErrStale) {
			t.Errorf("Claim(%d), beyond the store's range = %v, want an error", top+1, err)
		}
		if got := highWater(ctx, t, s, "beyond"); got != 0 {
			t.Errorf("a token beyond the range wrote high-water %d", got)
		}
	}
}

func testBadInput(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	if err := s.Fence.Claim(ctx, "k", 10); err != nil {
		t.Fatal(err)
	}
	if err := s.Fence.Claim(ctx, "k", 0); !errors.Is(err, token.ErrMissing) {
		t.Errorf("Claim with the zero token = %v, want ErrMissing", err)
	}
	if err := s.Fence.Claim(ctx, "fresh", 0); !errors.Is(err, token.ErrMissing) {
		t.Errorf("Claim with the zero token = %v, want ErrMissing", err)
	}
	if err := s.Fence.Claim(ctx, "", 11); !errors.Is(err, token.ErrNoResource) {
		t.Errorf("Claim with an empty key = %v, want ErrNoResource", err)
	}
	if got := highWater(ctx, t, s, "k"); got != 10 {
		t.Errorf("bad input moved the high-water to %d", got)
	}
	if got := highWater(ctx, t, s, "fresh"); got != 0 {
		t.Errorf("a refused claim wrote high-water %d", got)
	}
}

// Concurrent claims on a few resources: a refusal always reports a mark
// above the presented token, and every mark ends at the largest token
// presented for it.
func testConcurrent(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	const workers, perWorker, keys = 8, 30, 3
	var (
		mu      sync.Mutex
		maxSeen = map[string]token.Token{}
		wg      sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for i := range perWorker {
				k := fmt.Sprint("c", rand.N(keys))
				tok := token.Token(1 + i*2 + rand.N(20))
				err := s.Fence.Claim(ctx, k, tok)
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
		if got := highWater(ctx, t, s, k); got != want {
			t.Errorf("%s: high-water %d, want the largest presented %d", k, got, want)
		}
	}
}
