package memlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/token"
)

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func lostOf(t *testing.T, l locks.Lease) <-chan struct{} {
	t.Helper()
	n, ok := l.(locks.LossNotifier)
	if !ok {
		t.Fatalf("%T does not implement locks.LossNotifier", l)
	}
	return n.Lost()
}

// Break closes the holder's Lost channel before it returns; the holder's
// own Release never does.
func TestLostClosedByBreakNotByRelease(t *testing.T) {
	ctx := context.Background()
	l := memlock.New()
	a := mustAcquire(t, l, "k")
	if isClosed(lostOf(t, a)) {
		t.Fatal("Lost closed on a held lease")
	}
	l.Break("k")
	if !isClosed(lostOf(t, a)) {
		t.Fatal("Lost still open after Break returned")
	}

	b := mustAcquire(t, l, "k")
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if isClosed(lostOf(t, b)) {
		t.Error("Lost closed by the holder's own Release")
	}
}

// An expired lease's Lost channel closes when the Locker notices the
// expiry, here when another client acquires the key.
func TestLostClosedWhenExpiryNoticed(t *testing.T) {
	clk := newFakeClock()
	l := memlock.New()
	memlock.SetClock(l, clk.Now)
	a := mustAcquire(t, l, "k")
	clk.Advance(2 * time.Hour)
	if isClosed(lostOf(t, a)) {
		t.Fatal("Lost closed before anything looked at the key")
	}
	_ = mustAcquire(t, l, "k")
	if !isClosed(lostOf(t, a)) {
		t.Fatal("Lost still open after the key was granted again")
	}
}

// TakeOver grants the key at once, above every earlier token, ahead of a
// waiter; the old holder is told nothing until it renews or releases, and
// the waiter is served after the new holder.
func TestTakeOver(t *testing.T) {
	ctx := context.Background()
	l := memlock.New()
	h := installHooks(l, "", "")
	old := mustAcquire(t, l, "k")
	waiter := acquireAsync(ctx, l, "waiter", "k", time.Hour)
	expectWaiting(t, h, "waiter")

	next, err := l.TakeOver("k", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() <= old.Token() {
		t.Fatalf("TakeOver token %d, not above the old holder's %d", next.Token(), old.Token())
	}
	if got := current(t, l, "k"); got != next.Token() {
		t.Fatalf("Current = %d, want the new holder's %d", got, next.Token())
	}
	if isClosed(lostOf(t, old)) {
		t.Error("TakeOver closed the old holder's Lost")
	}
	if err := old.Renew(ctx); !errors.Is(err, locks.ErrNotHeld) {
		t.Errorf("old holder's Renew = %v, want ErrNotHeld", err)
	}
	if err := old.Release(ctx); !errors.Is(err, locks.ErrNotHeld) {
		t.Errorf("old holder's Release = %v, want ErrNotHeld", err)
	}
	select {
	case r := <-waiter:
		t.Fatalf("waiter granted while the new holder holds the key: %v", r.err)
	default:
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-waiter
	if r.err != nil {
		t.Fatal(r.err)
	}
	if tokenOf(r.lease) <= next.Token() {
		t.Errorf("waiter's token %d, not above the new holder's %d", tokenOf(r.lease), next.Token())
	}
	_ = r.lease.Release(ctx)
	if n := memlock.Len(l); n != 0 {
		t.Errorf("%d keys left behind", n)
	}
}

func TestTakeOverRefusesBadArguments(t *testing.T) {
	l := memlock.New()
	if _, err := l.TakeOver("", time.Second); !errors.Is(err, locks.ErrInvalidArgument) {
		t.Errorf("empty key: %v, want ErrInvalidArgument", err)
	}
	if _, err := l.TakeOver("k", 0); !errors.Is(err, locks.ErrInvalidArgument) {
		t.Errorf("zero TTL: %v, want ErrInvalidArgument", err)
	}
	memlock.SetLast(l, token.MaxInt64)
	if _, err := l.TakeOver("k", time.Second); !errors.Is(err, token.ErrRange) {
		t.Errorf("at the ceiling: %v, want ErrRange", err)
	}
	if n := memlock.Len(l); n != 0 {
		t.Errorf("%d keys left behind", n)
	}
}

func quietGuard(t *testing.T, l *memlock.Locker, ttl time.Duration) *guard.Guard {
	t.Helper()
	g, err := guard.New(l, guard.Options{TTL: ttl, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// A guard learns of a Break from the lease at once: the critical section's
// context is cancelled without waiting for the next renewal (an hour
// away here).
func TestGuardSeesBreakAtOnce(t *testing.T) {
	l := memlock.New()
	g := quietGuard(t, l, 3*time.Hour)
	err := g.Do(context.Background(), "k", func(ctx context.Context, _ token.Token) error {
		l.Break("k")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Second):
			t.Error("fn's context still live 10s after Break")
			return nil
		}
	})
	if !errors.Is(err, guard.ErrLost) || !errors.Is(err, locks.ErrNotHeld) {
		t.Fatalf("Do = %v, want ErrLost wrapping ErrNotHeld", err)
	}
}

// Under testing/synctest a guard over a Locker runs on the bubble's clock:
// after a Break, synctest.Wait returns with fn's context already
// cancelled; after a TakeOver, the holder goes on until its next renewal,
// which a time.Sleep of the renewal interval reaches at no cost, and
// meanwhile the fence refuses it.
func TestGuardUnderSynctest(t *testing.T) {
	t.Run("Break", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := memlock.New()
			g := quietGuard(t, l, 30*time.Second)
			err := g.Do(t.Context(), "k", func(ctx context.Context, _ token.Token) error {
				l.Break("k")
				synctest.Wait()
				if ctx.Err() == nil {
					t.Error("fn's context live after Break and synctest.Wait")
				}
				return nil
			})
			if !errors.Is(err, guard.ErrLost) {
				t.Fatalf("Do = %v, want ErrLost", err)
			}
		})
	})
	t.Run("TakeOver", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := memlock.New()
			var fence token.MemoryFence
			const ttl = 30 * time.Second
			g := quietGuard(t, l, ttl)
			start := time.Now()
			err := g.Do(t.Context(), "k", func(ctx context.Context, tok token.Token) error {
				if err := fence.Claim(ctx, "k", tok); err != nil {
					t.Fatalf("holder's first claim: %v", err)
				}
				next, err := l.TakeOver("k", ttl)
				if err != nil {
					t.Fatal(err)
				}
				if err := fence.Claim(ctx, "k", next.Token()); err != nil {
					t.Fatalf("new holder's claim: %v", err)
				}
				synctest.Wait()
				if ctx.Err() != nil {
					t.Error("the holder was told of a TakeOver")
				}
				var stale *token.StaleError
				if err := fence.Claim(ctx, "k", tok); !errors.As(err, &stale) || stale.Current != next.Token() {
					t.Errorf("old holder's claim = %v, want stale against %d", err, next.Token())
				}
				time.Sleep(ttl / 3) // the guard's renewal interval
				synctest.Wait()
				if !errors.Is(context.Cause(ctx), locks.ErrNotHeld) {
					t.Errorf("after the renewal: cause %v, want ErrNotHeld", context.Cause(ctx))
				}
				return next.Release(ctx)
			})
			if !errors.Is(err, guard.ErrLost) {
				t.Fatalf("Do = %v, want ErrLost", err)
			}
			if took := time.Since(start); took != ttl/3 {
				t.Errorf("took %v on the bubble's clock, want exactly the renewal interval %v", took, ttl/3)
			}
		})
	})
}

// Keys whose leases ran out unreleased and that nobody uses again go as
// other keys are used: every new entry sweeps two others. Their Lost
// channels close then.
func TestAbandonedKeysSweptAsOtherKeysAreUsed(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	l := memlock.New()
	memlock.SetClock(l, clk.Now)
	const n = 1000
	var abandoned []locks.Lease
	for i := range n {
		abandoned = append(abandoned, mustAcquire(t, l, fmt.Sprintf("abandoned-%d", i)))
	}
	clk.Advance(2 * time.Hour)
	if got := memlock.Len(l); got != n {
		t.Fatalf("%d entries before any sweep, want %d", got, n)
	}
	for i := range n / 2 {
		lease := mustAcquire(t, l, fmt.Sprintf("other-%d", i))
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := memlock.Len(l); got != 0 {
		t.Errorf("%d entries left after %d other keys were used, want 0", got, n/2)
	}
	for _, a := range abandoned {
		if !isClosed(lostOf(t, a)) {
			t.Fatalf("%s: Lost still open after its entry was swept", a.Key())
		}
	}
}
