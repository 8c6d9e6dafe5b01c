package guard_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/enforce"
)

// recording is a locker that records the keys asked for, in order.
type recording struct {
	locks.Locker
	mu   sync.Mutex
	keys []string
}

func (r *recording) record(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = append(r.keys, key)
}

func (r *recording) asked() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.keys)
}

func (r *recording) Acquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	r.record(key)
	return r.Locker.Acquire(ctx, key, ttl)
}

func (r *recording) TryAcquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	r.record(key)
	return r.Locker.TryAcquire(ctx, key, ttl)
}

func TestAcquireAllTakesKeysInCanonicalOrder(t *testing.T) {
	r := &recording{Locker: memlock.New()}
	g := newGuard(t, r, guard.Options{TTL: 5 * time.Second})
	s, err := g.AcquireAll(testCtx(t), "c", "a", "b", "a")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(context.Background())
	want := []string{"a", "b", "c"}
	if got := r.asked(); !slices.Equal(got, want) {
		t.Errorf("keys asked in order %q, want %q", got, want)
	}
	if got := s.Keys(); !slices.Equal(got, want) {
		t.Errorf("Keys() = %q, want %q", got, want)
	}
	tokens := s.Tokens()
	for _, k := range want {
		if tokens[k].IsZero() || s.Token(k) != tokens[k] || s.Lease(k).Token() != tokens[k] {
			t.Errorf("key %q: Tokens %d, Token %d", k, tokens[k], s.Token(k))
		}
		if got, ok := token.Lookup(s.Context(), k); !ok || got != tokens[k] {
			t.Errorf("context carries %d for %q, want %d", got, k, tokens[k])
		}
		assertHeld(t, r.Locker, k)
	}
	if s.Token("d") != 0 || s.Lease("d") != nil {
		t.Error("a key not in the set has a token or a lease")
	}
	if exp, ok := token.Expiry(s.Context()); !ok || !exp.After(time.Now()) {
		t.Errorf("context expiry %v, %v: want the earliest lease end, ahead", exp, ok)
	}
	// A lease of the set cannot be released on its own.
	if err := s.Lease("b").Release(context.Background()); err != nil {
		t.Errorf("releasing a member: %v", err)
	}
	assertHeld(t, r.Locker, "b")
	if err := s.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, k := range want {
		assertFree(t, r.Locker, k)
	}
	if !errors.Is(context.Cause(s.Context()), guard.ErrReleased) {
		t.Errorf("context cause after Release: %v", context.Cause(s.Context()))
	}
	if err := s.Release(context.Background()); err != nil {
		t.Errorf("second Release: %v", err)
	}
}

func TestAcquireAllRefusesBadKeysBeforeTakingAny(t *testing.T) {
	r := &recording{Locker: memlock.New()}
	g := newGuard(t, r, guard.Options{TTL: 5 * time.Second})
	for _, keys := range [][]string{nil, {"a", ""}, {""}} {
		if _, err := g.AcquireAll(testCtx(t), keys...); !errors.Is(err, locks.ErrInvalidArgument) {
			t.Errorf("AcquireAll(%q): %v, want ErrInvalidArgument", keys, err)
		}
		if err := g.DoAll(testCtx(t), keys, func(context.Context, map[string]token.Token) error {
			t.Error("fn ran")
			return nil
		}); !errors.Is(err, locks.ErrInvalidArgument) {
			t.Errorf("DoAll(%q): %v, want ErrInvalidArgument", keys, err)
		}
	}
	if got := r.asked(); len(got) != 0 {
		t.Errorf("asked for %q", got)
	}
}

// A failure half-way gives back what was taken, and names the key.
func TestAcquireAllReleasesWhatItTookWhenOneFails(t *testing.T) {
	ml := memlock.New()
	g := newGuard(t, ml, guard.Options{TTL: 5 * time.Second})
	other, err := ml.Acquire(testCtx(t), "b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = g.AcquireAll(ctx, "c", "b", "a")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), `"b"`) {
		t.Errorf("AcquireAll with b held: %v, want the deadline, naming b", err)
	}
	assertFree(t, ml, "a")
	assertFree(t, ml, "c") // never asked for: it sorts after b

	_, err = g.TryAcquireAll(testCtx(t), "a", "b", "c")
	if !errors.Is(err, locks.ErrNotObtained) || !strings.Contains(err.Error(), `"b"`) {
		t.Errorf("TryAcquireAll with b held: %v, want ErrNotObtained naming b", err)
	}
	assertFree(t, ml, "a")
	assertFree(t, ml, "c")
}

// The set's context ends when any one lease is lost, naming it; the rest
// are released with the set.
func TestLeasesContextEndsWhenAnyLeaseIsLost(t *testing.T) {
	ml := memlock.New()
	g := newGuard(t, ml, guard.Options{TTL: time.Second, RenewInterval: 20 * time.Millisecond})
	s, err := g.AcquireAll(testCtx(t), "a", "b", "c")
	if err != nil {
		t.Fatal(err)
	}
	tb := s.Token("b")
	ml.Break("b")
	select {
	case <-s.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the set's context outlived a lost lease")
	}
	cause := context.Cause(s.Context())
	if !errors.Is(cause, guard.ErrLost) || !errors.Is(cause, locks.ErrNotHeld) || !strings.Contains(cause.Error(), `"b"`) || !strings.Contains(cause.Error(), tb.String()) {
		t.Errorf("cause %v: want ErrLost naming b and its token", cause)
	}
	if err := s.Release(context.Background()); !errors.Is(err, guard.ErrLost) {
		t.Errorf("Release after the loss: %v, want ErrLost", err)
	}
	assertFree(t, ml, "a")
	assertFree(t, ml, "c")
}

func TestDoAll(t *testing.T) {
	ml := memlock.New()
	g := newGuard(t, ml, guard.Options{TTL: 5 * time.Second})
	ran := false
	err := g.DoAll(testCtx(t), []string{"acct:2", "acct:1"}, func(ctx context.Context, tokens map[string]token.Token) error {
		ran = true
		if len(tokens) != 2 {
			t.Errorf("tokens %v", tokens)
		}
		for k, tok := range tokens {
			assertHeld(t, ml, k)
			if got, err := enforce.Resolve(ctx, k, 0); err != nil || got != tok {
				t.Errorf("Resolve(%q, 0) = %d, %v; want %d", k, got, err, tok)
			}
		}
		if _, ok := token.Expiry(ctx); !ok {
			t.Error("fn's context carries no expiry")
		}
		return nil
	})
	if err != nil || !ran {
		t.Fatalf("DoAll: %v (ran %v)", err, ran)
	}
	assertFree(t, ml, "acct:1")
	assertFree(t, ml, "acct:2")

	boom := errors.New("boom")
	if err := g.DoAll(testCtx(t), []string{"a", "b"}, func(context.Context, map[string]token.Token) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("DoAll returned %v, want fn's error", err)
	}
	assertFree(t, ml, "a")
	func() {
		defer func() { _ = recover() }()
		_ = g.DoAll(testCtx(t), []string{"a", "b"}, func(context.Context, map[string]token.Token) error { panic("fn") })
	}()
	assertFree(t, ml, "a")
	assertFree(t, ml, "b")
}

// fn's context ends when a lease is lost, and DoAll says fn's work may have
// taken effect when fn returned nil.
func TestDoAllReportsALossDuringFn(t *testing.T) {
	ml := memlock.New()
	g := newGuard(t, ml, guard.Options{TTL: time.Second, RenewInterval: 20 * time.Millisecond})
	err := g.DoAll(testCtx(t), []string{"a", "b"}, func(ctx context.Context, _ map[string]token.Token) error {
		ml.Break("a")
		<-ctx.Done()
		if c := context.Cause(ctx); !errors.Is(c, guard.ErrLost) || !strings.Contains(c.Error(), `"a"`) {
			t.Errorf("fn's context cause %v, want ErrLost naming a", c)
		}
		return nil
	})
	if !errors.Is(err, guard.ErrLost) || !strings.Contains(err.Error(), "may have taken effect") {
		t.Errorf("DoAll: %v, want ErrLost saying fn's work may have taken effect", err)
	}
	assertFree(t, ml, "b")
}

// Re-entrancy composes with the single-key form both ways: a key the
// enclosing section holds is a nested hold, and stays held after.
func TestDoAllComposesWithDo(t *testing.T) {
	ml := memlock.New()
	g := newGuard(t, ml, guard.Options{TTL: 5 * time.Second})
	err := g.Do(testCtx(t), "b", func(ctx context.Context, tb token.Token) error {
		err := g.DoAll(ctx, []string{"a", "b"}, func(ctx context.Context, tokens map[string]token.Token) error {
			if tokens["b"] != tb {
				t.Errorf("nested b has token %d, want the enclosing hold's %d", tokens["b"], tb)
			}
			return g.Do(ctx, "a", func(_ context.Context, ta token.Token) error {
				if ta != tokens["a"] {
					t.Errorf("Do inside DoAll: token %d, want the set's %d", ta, tokens["a"])
				}
				return nil
			})
		})
		if err != nil {
			return err
		}
		assertHeld(t, ml, "b")
		assertFree(t, ml, "a")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	assertFree(t, ml, "b")
}

// multiTry is a locker that can try several keys at once (all or none),
// counting the calls; fail, when set, is what every such call returns.
type multiTry struct {
	recording
	calls atomic.Int32
	fail  error
}

func (m *multiTry) TryAcquireAll(ctx context.Context, keys []string, ttl time.Duration) ([]locks.Lease, error) {
	m.calls.Add(1)
	if !slices.IsSorted(keys) {
		return nil, errors.New("keys not sorted")
	}
	if m.fail != nil {
		return nil, m.fail
	}
	var got []locks.Lease
	for _, k := range keys {
		l, err := m.recording.Locker.TryAcquire(ctx, k, ttl)
		if err != nil {
			for _, l := range got {
				_ = l.Release(ctx)
			}
			return nil, fmt.Errorf("%q: %w", k, err)
		}
		got = append(got, l)
	}
	return got, nil
}

func TestAcquireAllTriesAllKeysInOneCallWhenTheLockerCan(t *testing.T) {
	m := &multiTry{recording: recording{Locker: memlock.New()}}
	g := newGuard(t, m, guard.Options{TTL: 5 * time.Second})
	s, err := g.AcquireAll(testCtx(t), "b", "a")
	if err != nil {
		t.Fatal(err)
	}
	if m.calls.Load() != 1 || len(m.asked()) != 0 {
		t.Errorf("%d calls for all keys, %q one by one; want one call", m.calls.Load(), m.asked())
	}
	for _, k := range []string{"a", "b"} {
		assertHeld(t, m.Locker, k)
	}
	if err := s.Release(context.Background()); err != nil {
		t.Fatal(err)
	}

	// A key held: TryAcquireAll answers with that one call; AcquireAll
	// waits for the key, one by one in order.
	other, err := m.Locker.Acquire(testCtx(t), "b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.TryAcquireAll(testCtx(t), "a", "b"); !errors.Is(err, locks.ErrNotObtained) || len(m.asked()) != 0 {
		t.Errorf("TryAcquireAll with b held: %v, then one by one %q", err, m.asked())
	}
	time.AfterFunc(100*time.Millisecond, func() { _ = other.Release(context.Background()) })
	s, err = g.AcquireAll(testCtx(t), "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	if got := m.asked(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("after the held key, asked one by one for %q", got)
	}
	_ = s.Release(context.Background())

	// A locker that cannot take these keys together: one by one.
	m.fail = fmt.Errorf("keys in several slots: %w", locks.ErrInvalidArgument)
	if err := g.DoAll(testCtx(t), []string{"x", "y"}, func(context.Context, map[string]token.Token) error { return nil }); err != nil {
		t.Errorf("DoAll over a locker refusing the keys together: %v", err)
	}
	// Keys an enclosing section holds: one by one, the held one nested.
	before := m.calls.Load()
	err = g.Do(testCtx(t), "q", func(ctx context.Context, _ token.Token) error {
		return g.DoAll(ctx, []string{"p", "q"}, func(context.Context, map[string]token.Token) error { return nil })
	})
	if err != nil || m.calls.Load() != before {
		t.Errorf("DoAll nested in a hold of q: %v, %d calls for all keys", err, m.calls.Load()-before)
	}
}

// A section nested in another reports the earliest end of every lease
// around it: once the enclosing set's lease on a is lost, the end a nested
// Do of c reports is past, though c's own lease lives.
func TestNestedSectionReportsTheEarliestLeaseEnd(t *testing.T) {
	ml := memlock.New()
	g := newGuard(t, ml, guard.Options{TTL: 10 * time.Second, RenewInterval: 20 * time.Millisecond})
	err := g.DoAll(testCtx(t), []string{"a", "b"}, func(ctx context.Context, _ map[string]token.Token) error {
		return g.Do(ctx, "c", func(ctx context.Context, _ token.Token) error {
			detached := context.WithoutCancel(ctx) // as a frozen holder would still see it
			if exp, _ := token.Expiry(detached); !exp.After(time.Now().Add(5 * time.Second)) {
				t.Errorf("end reported while every lease lives: %v from now", time.Until(exp))
			}
			ml.Break("a")
			<-ctx.Done()
			if exp, _ := token.Expiry(detached); exp.After(time.Now()) {
				t.Errorf("a's lease lost, but the nested section reports its end %v from now", time.Until(exp))
			}
			return nil
		})
	})
	if !errors.Is(err, guard.ErrLost) {
		t.Errorf("DoAll: %v, want ErrLost", err)
	}
}
