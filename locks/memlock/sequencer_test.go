package memlock_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/token"
)

func mustAcquire(t *testing.T, l *memlock.Locker, key string) locks.Lease {
	t.Helper()
	lease, err := l.Acquire(context.Background(), key, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return lease
}

func current(t *testing.T, l *memlock.Locker, key string) token.Token {
	t.Helper()
	cur, err := l.Current(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return cur
}

// Current is the holder's token while the key is held — whatever other
// keys are granted meanwhile — and the last token issued while it is free:
// at least the key's last grant, below its next.
func TestCurrent(t *testing.T) {
	ctx := context.Background()
	l := memlock.New()
	if got := current(t, l, "a"); got != 0 {
		t.Fatalf("Current before any grant = %d, want 0", got)
	}
	a := mustAcquire(t, l, "a")
	b := mustAcquire(t, l, "b") // raises the shared counter
	if got := current(t, l, "a"); got != a.Token() {
		t.Errorf("Current(a) while held = %d, want the holder's %d (not Issued's %d)", got, a.Token(), b.Token())
	}
	issued, _ := l.Issued(ctx, "a")
	if issued != b.Token() {
		t.Errorf("Issued = %d, want %d", issued, b.Token())
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	free := current(t, l, "a")
	if free != b.Token() {
		t.Errorf("Current(a) while free = %d, want the last issued %d", free, b.Token())
	}
	a2 := mustAcquire(t, l, "a")
	if free >= a2.Token() {
		t.Errorf("Current(a) while free = %d is not below the next grant %d", free, a2.Token())
	}
	if got := current(t, l, "a"); got != a2.Token() {
		t.Errorf("Current(a) = %d, want %d", got, a2.Token())
	}
	_ = a2.Release(ctx)
	_ = b.Release(ctx)
}

// Successive answers for a key never decrease, through grants, waits,
// hand-overs, expiry and breaks.
func TestCurrentNeverDecreases(t *testing.T) {
	ctx := context.Background()
	l := memlock.New()
	clk := newFakeClock()
	memlock.SetClock(l, clk.Now)
	last := token.Token(0)
	see := func(step string) {
		t.Helper()
		if got := current(t, l, "k"); got < last {
			t.Fatalf("%s: Current %d after %d", step, got, last)
		} else {
			last = got
		}
	}
	see("start")
	h := mustAcquire(t, l, "k")
	see("held")
	w := acquireAsync(ctx, l, "w", "k", time.Hour)
	see("waiter queued")
	_ = mustAcquire(t, l, "other")
	see("other key granted")
	_ = h.Release(ctx)
	r := <-w
	if r.err != nil {
		t.Fatal(r.err)
	}
	see("handed over")
	clk.Advance(2 * time.Hour)
	see("expired, not yet noticed")
	if _, err := l.TryAcquire(ctx, "k", time.Hour); err != nil {
		t.Fatal(err)
	}
	see("taken after expiry")
	l.Break("k")
	see("broken")
}

// The counter refuses to grant past MaxToken with a *token.RangeError
// rather than wrap around to a token below earlier ones, and leaves
// nothing behind; a waiter handed the lock then gets the same refusal.
func TestCounterCeiling(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		last token.Token
	}{
		{"at MaxToken", token.MaxInt64},
		{"2^64-1, where +1 wraps to 0", math.MaxUint64},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := memlock.New()
			memlock.SetLast(l, tt.last)
			for name, acquire := range map[string]func() (locks.Lease, error){
				"Acquire":    func() (locks.Lease, error) { return l.Acquire(ctx, "k", time.Second) },
				"TryAcquire": func() (locks.Lease, error) { return l.TryAcquire(ctx, "k", time.Second) },
			} {
				lease, err := acquire()
				var re *token.RangeError
				if !errors.As(err, &re) || !errors.Is(err, token.ErrRange) || re.Max != token.MaxInt64 {
					t.Fatalf("%s: lease %d, err %v; want a *token.RangeError with Max %d", name, tokenOf(lease), err, token.MaxInt64)
				}
			}
			if n := memlock.Len(l); n != 0 {
				t.Errorf("%d keys left behind", n)
			}
			if issued, _ := l.Issued(ctx, "k"); issued != tt.last {
				t.Errorf("Issued %d, want %d: the counter moved", issued, tt.last)
			}
		})
	}
	t.Run("the last token, then a waiter", func(t *testing.T) {
		l := memlock.New()
		memlock.SetLast(l, token.MaxInt64-1)
		h := installHooks(l, "", "")
		holder := mustAcquire(t, l, "k")
		if holder.Token() != token.MaxInt64 {
			t.Fatalf("token %d, want MaxToken", holder.Token())
		}
		w := acquireAsync(ctx, l, "w", "k", time.Second)
		expectWaiting(t, h, "w")
		_ = holder.Release(ctx)
		if r := <-w; !errors.Is(r.err, token.ErrRange) {
			t.Fatalf("waiter: token %d, err %v; want ErrRange", tokenOf(r.lease), r.err)
		}
		if n := memlock.Len(l); n != 0 {
			t.Errorf("%d keys left behind", n)
		}
	})
}

// A clock before 1970 floors nothing: tokens stay small and increasing
// instead of turning into huge unsigned numbers.
func TestClockBefore1970(t *testing.T) {
	l := memlock.New()
	memlock.SetClock(l, func() time.Time { return time.Date(1969, 7, 20, 20, 17, 0, 0, time.UTC) })
	var last token.Token
	for range 3 {
		lease := mustAcquire(t, l, "k")
		if lease.Token() != last+1 {
			t.Fatalf("token %d after %d, want %d", lease.Token(), last, last+1)
		}
		last = lease.Token()
		_ = lease.Release(context.Background())
	}
}

// The forgery scenario of issue 15 on memlock: a holder H, waiters W1 and
// W2, a forger. The sequencer check in front of the resource's fence
// refuses every token above H's — the last issued token included, which
// another key's grant has pushed above H's — and the honest holders all
// get through, one after another.
func TestSequencerCheckStopsForger(t *testing.T) {
	ctx := context.Background()
	const key = "sku:42"
	setup := func(t *testing.T, check func(*memlock.Locker) token.Check) (*memlock.Locker, *token.MemoryFence, locks.Lease, []chan result, token.Token) {
		l := memlock.New()
		h := installHooks(l, "", "")
		fence := &token.MemoryFence{Check: check(l)}
		holder := mustAcquire(t, l, key)
		var waiters []chan result
		for _, name := range []string{"w1", "w2"} {
			waiters = append(waiters, acquireAsync(ctx, l, name, key, time.Hour))
			expectWaiting(t, h, name)
		}
		other := mustAcquire(t, l, "sku:7") // another key's grant: Issued moves past H's token
		t.Cleanup(func() { _ = other.Release(ctx) })
		issued, _ := l.Issued(ctx, key)
		if issued <= holder.Token() {
			t.Fatalf("Issued %d is not above the holder's %d", issued, holder.Token())
		}
		if err := fence.Claim(ctx, key, holder.Token()); err != nil {
			t.Fatalf("holder: %v", err)
		}
		return l, fence, holder, waiters, issued
	}

	t.Run("sequencer check", func(t *testing.T) {
		_, fence, holder, waiters, issued := setup(t, func(l *memlock.Locker) token.Check {
			return token.All(token.ClockBound{}, token.SequencerCheck(l, token.SequencerOptions{}))
		})
		for _, forged := range []token.Token{holder.Token() + 1, issued, 1 << 62, math.MaxUint64} {
			err := fence.Claim(ctx, key, forged)
			var fe *token.ForgedError
			if !errors.As(err, &fe) {
				t.Fatalf("forged %d: err %v, want a *token.ForgedError", forged, err)
			}
			if fe.By == "sequencer" && fe.Bound != holder.Token() {
				t.Errorf("forged %d: sequencer bound %d, want the holder's %d", forged, fe.Bound, holder.Token())
			}
		}
		if hw := fence.HighWater(key); hw != holder.Token() {
			t.Fatalf("high-water %d, want the holder's %d", hw, holder.Token())
		}
		if err := fence.Claim(ctx, key, holder.Token()); err != nil {
			t.Fatalf("the holder is locked out: %v", err)
		}
		prev := holder
		_ = holder.Release(ctx)
		for i, w := range waiters {
			r := <-w
			if r.err != nil {
				t.Fatal(r.err)
			}
			if err := fence.Claim(ctx, key, r.lease.Token()); err != nil {
				t.Fatalf("w%d with %d: %v", i+1, r.lease.Token(), err)
			}
			if err := fence.Claim(ctx, key, r.lease.Token()+1); !errors.Is(err, token.ErrForged) {
				t.Errorf("w%d's token + 1: %v, want ErrForged", i+1, err)
			}
			if err := fence.Claim(ctx, key, prev.Token()); !errors.Is(err, token.ErrStale) {
				t.Errorf("the previous holder after w%d: %v, want ErrStale", i+1, err)
			}
			prev = r.lease
			_ = r.lease.Release(ctx)
		}
	})

	// The control: with only an upper bound of what was issued (the old
	// Issued check), the forger's token is accepted and the holder, who
	// still holds the lock, is refused from then on.
	t.Run("control: an Issued bound", func(t *testing.T) {
		_, fence, holder, waiters, issued := setup(t, func(l *memlock.Locker) token.Check {
			return token.CheckFunc(func(ctx context.Context, resource string, t token.Token) error {
				if b, _ := l.Issued(ctx, resource); t > b {
					return &token.ForgedError{Resource: resource, Presented: t, Bound: b, By: "issued"}
				}
				return nil
			})
		})
		if err := fence.Claim(ctx, key, issued); err != nil {
			t.Fatalf("the Issued bound refused %d: %v", issued, err)
		}
		if err := fence.Claim(ctx, key, holder.Token()); !errors.Is(err, token.ErrStale) {
			t.Fatalf("holder after the forgery: %v, want ErrStale (locked out)", err)
		}
		_ = holder.Release(ctx)
		for _, w := range waiters {
			r := <-w
			if r.err == nil {
				_ = r.lease.Release(ctx)
			}
		}
	})
}
