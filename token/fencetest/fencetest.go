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
// compare exactly; under concurrent claims a refusal always reports a mark
// above the presented token and every mark ends at the largest token
// presented for it; the fence runs the [token.Check] it was built with
// before touching its store ([token.DefaultCheck] when none), and a refusal
// by it moves nothing; and [token.Resetter.Reset] moves exactly the mark it
// names.
package fencetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
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
// subtest's t and the check the fence must run before each claim (nil: the
// fence's default), and must return a fence whose marks no other subtest
// sees (a fresh store, or its own key prefix). The fence must implement
// [token.Resetter].
func Run(t *testing.T, newFence func(t *testing.T, check token.Check) Subject) {
	unchecked := func(t *testing.T) Subject { return newFence(t, token.NoCheck()) }
	t.Run("Claim", func(t *testing.T) { testClaim(t, unchecked(t)) })
	t.Run("Extremes", func(t *testing.T) { testExtremes(t, unchecked(t)) })
	t.Run("BadInput", func(t *testing.T) { testBadInput(t, unchecked(t)) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, unchecked(t)) })
	t.Run("DefaultCheck", func(t *testing.T) { testDefaultCheck(t, newFence(t, nil)) })
	t.Run("Check", func(t *testing.T) { testCheck(t, newFence) })
	t.Run("Reset", func(t *testing.T) { testReset(t, unchecked(t)) })
	t.Run("ContextToken", func(t *testing.T) { testContextToken(t, unchecked(t)) })
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

// The zero token takes the context's token for the context's own key only:
// for another key it is refused as missing, naming both keys, and moves no
// mark.
func testContextToken(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	held := token.NewContext(ctx, "held", 20)
	if err := s.Fence.Claim(held, "held", 0); err != nil {
		t.Fatalf("Claim(held, 0) in a context carrying held's token 20 = %v, want nil", err)
	}
	if got := highWater(ctx, t, s, "held"); got != 20 {
		t.Errorf("after the context's token was claimed, high-water %d, want 20", got)
	}
	err := s.Fence.Claim(held, "other", 0)
	if !errors.Is(err, token.ErrMissing) || !strings.Contains(err.Error(), `"other"`) || !strings.Contains(err.Error(), `"held"`) {
		t.Errorf("Claim(other, 0) in a context carrying held's token = %v, want an error wrapping ErrMissing that names both keys", err)
	}
	if got := highWater(ctx, t, s, "other"); got != 0 {
		t.Errorf("another key's context token wrote high-water %d", got)
	}
	// An explicit token wins over the context's.
	if err := s.Fence.Claim(held, "held", 19); !errors.Is(err, token.ErrStale) {
		t.Errorf("Claim(held, 19) in a context carrying 20 = %v, want stale (the explicit token is the one presented)", err)
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

// The default check is the clock bound: a token far above the clock in µs
// is refused as forged and moves nothing; a token at the clock passes.
func testDefaultCheck(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	now := token.Token(time.Now().UnixMicro())
	far := now + token.Token(time.Hour.Microseconds())
	if err := s.Fence.Claim(ctx, "d", now); err != nil {
		t.Fatalf("Claim(now in µs) = %v, want accepted", err)
	}
	for _, tok := range []token.Token{far, math.MaxInt64, math.MaxUint64} {
		err := s.Fence.Claim(ctx, "d", tok)
		var fe *token.ForgedError
		if !errors.As(err, &fe) || !errors.Is(err, token.ErrForged) || fe.Presented != tok || fe.Resource != "d" {
			t.Errorf("Claim(%d), far above the clock = %v, want a ForgedError", tok, err)
		}
	}
	if got := highWater(ctx, t, s, "d"); got != now {
		t.Errorf("a forged token moved the mark to %d, want %d", got, now)
	}
}

var errUnsure = errors.New("fencetest: the check could not decide")

// The fence runs the check it was given, with the resource and the token,
// before its store; a refusal (forged, or could not decide) comes back as
// the fence's error and moves nothing.
func testCheck(t *testing.T, newFence func(*testing.T, token.Check) Subject) {
	ctx := ctxFor(t)
	var mu sync.Mutex
	var seen []string
	check := token.CheckFunc(func(_ context.Context, r string, tok token.Token) error {
		mu.Lock()
		seen = append(seen, fmt.Sprint(r, "=", tok))
		mu.Unlock()
		switch tok {
		case 13:
			return &token.ForgedError{Resource: r, Presented: tok, Bound: 12, By: "test"}
		case 14:
			return errUnsure
		}
		return nil
	})
	s := newFence(t, check)
	if err := s.Fence.Claim(ctx, "c", 12); err != nil {
		t.Fatalf("Claim(12) = %v", err)
	}
	if err := s.Fence.Claim(ctx, "c", 13); !errors.Is(err, token.ErrForged) {
		t.Errorf("Claim(13), refused by the check = %v, want ErrForged", err)
	}
	if err := s.Fence.Claim(ctx, "c", 14); !errors.Is(err, errUnsure) {
		t.Errorf("Claim(14), the check failing = %v, want its error", err)
	}
	if got := highWater(ctx, t, s, "c"); got != 12 {
		t.Errorf("refused by the check, the mark moved to %d", got)
	}
	if err := s.Fence.Claim(ctx, "c", 20); err != nil {
		t.Fatalf("Claim(20) = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"c=12", "c=13", "c=14", "c=20"}; fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("the check saw %v, want %v", seen, want)
	}
}

// Reset sets exactly the named mark, lower or higher, and refuses bad
// input; a reset mark accepts honest holders again.
func testReset(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	r, ok := s.Fence.(token.Resetter)
	if !ok {
		t.Fatalf("%T does not implement token.Resetter", s.Fence)
	}
	poisoned := token.Token(math.MaxInt64)
	for _, k := range []string{"a", "b"} {
		if err := s.Fence.Claim(ctx, k, poisoned); err != nil {
			t.Fatal(err)
		}
	}
	stale(t, s.Fence.Claim(ctx, "a", 100), "a", 100, poisoned)
	prev, err := r.Reset(ctx, "a", 90)
	if err != nil || prev != poisoned {
		t.Fatalf("Reset(a, 90) = %d, %v; want %d, nil", prev, err, poisoned)
	}
	if err := s.Fence.Claim(ctx, "a", 100); err != nil {
		t.Errorf("after the reset, an honest holder's Claim(100) = %v", err)
	}
	stale(t, s.Fence.Claim(ctx, "a", 89), "a", 89, 100)
	stale(t, s.Fence.Claim(ctx, "b", 100), "b", 100, poisoned)
	if got := highWater(ctx, t, s, "b"); got != poisoned {
		t.Errorf("resetting a moved b to %d", got)
	}
	// A mark that never existed: reset creates it.
	if prev, err := r.Reset(ctx, "n", 7); err != nil || prev != 0 {
		t.Errorf("Reset(n, 7) = %d, %v; want 0, nil", prev, err)
	}
	stale(t, s.Fence.Claim(ctx, "n", 6), "n", 6, 7)
	// Raising by hand works too.
	if prev, err := r.Reset(ctx, "n", 50); err != nil || prev != 7 {
		t.Errorf("Reset(n, 50) = %d, %v; want 7, nil", prev, err)
	}
	if _, err := r.Reset(ctx, "", 5); !errors.Is(err, token.ErrNoResource) {
		t.Errorf("Reset with an empty name = %v, want ErrNoResource", err)
	}
	if _, err := r.Reset(ctx, "a", 0); !errors.Is(err, token.ErrMissing) {
		t.Errorf("Reset to 0 = %v, want ErrMissing", err)
	}
	if got := highWater(ctx, t, s, "a"); got != 100 {
		t.Errorf("refused resets moved a to %d", got)
	}
	if got := highWater(ctx, t, s, "n"); got != 50 {
		t.Errorf("n: mark %d, want 50", got)
	}
}
