package memlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/lockstest"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/token"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	lockstest.Run(t, lockstest.Config{
		NewLocker:    func(*testing.T) locks.Locker { return memlock.New() },
		NewSequencer: func(_ *testing.T, l locks.Locker) token.Sequencer { return l.(*memlock.Locker) },
		LockDelay: func(t *testing.T) (locks.Locker, time.Duration) {
			const delay = 600 * time.Millisecond
			l, err := memlock.NewWithOptions(memlock.Options{LockDelay: delay})
			if err != nil {
				t.Fatal(err)
			}
			return l, delay
		},
	})
}

// A new Locker stands for a restarted process: its counter starts from
// nothing, and only the clock floor keeps its tokens above the old ones.
func TestRestartedLockerIssuesLargerTokens(t *testing.T) {
	ctx := context.Background()
	var last token.Token
	for range 50 {
		l := memlock.New()
		for range 20 { // a burst: the counter runs ahead of the clock
			lease, err := l.Acquire(ctx, "k", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if lease.Token() <= last {
				t.Fatalf("token %d after %d from an earlier Locker", lease.Token(), last)
			}
			last = lease.Token()
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(50 * time.Microsecond) // the restart takes some time
	}
}

// A key whose lease ran out unreleased, with nobody waiting, is granted to
// one acquirer at a time, whichever call notices the expiry first.
func TestExpiredKeyIsGrantedToOneHolder(t *testing.T) {
	ctx := context.Background()
	l := memlock.New()
	for _, first := range []string{"TryAcquire", "Acquire"} {
		if _, err := l.Acquire(ctx, "k", time.Millisecond); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
		var a locks.Lease
		var err error
		if first == "TryAcquire" {
			a, err = l.TryAcquire(ctx, "k", time.Minute)
		} else {
			a, err = l.Acquire(ctx, "k", time.Minute)
		}
		if err != nil {
			t.Fatalf("%s after the expiry: %v", first, err)
		}
		if b, err := l.TryAcquire(ctx, "k", time.Minute); !errors.Is(err, locks.ErrNotObtained) {
			t.Fatalf("%s after the expiry, then TryAcquire: %v, token %v; want ErrNotObtained", first, err, b)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatalf("Release of the grant after the expiry: %v", err)
		}
	}
}

func TestIdleKeysLeaveNothingBehind(t *testing.T) {
	ctx := context.Background()
	l := memlock.New()
	for i := range 1000 {
		lease, err := l.Acquire(ctx, fmt.Sprint("k", i), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := memlock.Len(l); n != 0 {
		t.Fatalf("%d keys kept after every lock was released", n)
	}
}

// Issued bounds every token granted so far, for every key, and nothing
// more: a token above it was never issued.
func TestIssuedBoundsGrantedTokens(t *testing.T) {
	ctx := context.Background()
	l := memlock.New()
	if got, err := l.Issued(ctx, "a"); err != nil || got != 0 {
		t.Fatalf("Issued before any grant = %d, %v; want 0, nil", got, err)
	}
	var last token.Token
	for _, key := range []string{"a", "b", "a"} {
		lease, err := l.Acquire(ctx, key, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		last = lease.Token()
		for _, k := range []string{"a", "b"} {
			if got, err := l.Issued(ctx, k); err != nil || got != last {
				t.Fatalf("Issued(%q) after granting %d on %q = %d, %v; want %d", k, last, key, got, err, last)
			}
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLockDelayOutOfRangeIsRefused(t *testing.T) {
	for _, d := range []time.Duration{-time.Nanosecond, locks.MaxLockDelay + time.Nanosecond} {
		if _, err := memlock.NewWithOptions(memlock.Options{LockDelay: d}); !errors.Is(err, locks.ErrInvalidArgument) {
			t.Errorf("LockDelay %v: %v, want ErrInvalidArgument", d, err)
		}
	}
	if _, err := memlock.NewWithOptions(memlock.Options{LockDelay: locks.MaxLockDelay}); err != nil {
		t.Errorf("LockDelay %v: %v", locks.MaxLockDelay, err)
	}
}

type waiterKey struct{}

// Waiters queued behind a lease that expires unreleased are served in the
// order they queued once the lock-delay is over, none of them before it.
func TestLockDelayKeepsFIFOAfterExpiry(t *testing.T) {
	const ttl, delay = 100 * time.Millisecond, 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := memlock.NewWithOptions(memlock.Options{LockDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	waits := make(chan int, 256) // which waiter waits, at every wait
	memlock.SetHook(l, func(ctx context.Context, at string) {
		if i, ok := ctx.Value(waiterKey{}).(int); ok && at == memlock.WaitHook {
			select {
			case waits <- i:
			default:
			}
		}
	})
	first, err := l.Acquire(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	type served struct {
		i  int
		at time.Time
	}
	order := make(chan served, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			lease, err := l.Acquire(context.WithValue(ctx, waiterKey{}, i), "k", time.Minute)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			order <- served{i, time.Now()}
			if err := lease.Release(ctx); err != nil {
				t.Errorf("waiter %d release: %v", i, err)
			}
		})
		for w := range waits { // queued once it waits
			if w == i {
				break
			}
		}
	}
	bound := first.Deadline().Add(delay)
	wg.Wait()
	close(order)
	want := 0
	for s := range order {
		if s.i != want {
			t.Fatalf("waiter %d was served when waiter %d's turn came", s.i, want)
		}
		if s.at.Before(bound) {
			t.Errorf("waiter %d served %v before the expired lease's Deadline plus the delay", s.i, bound.Sub(s.at))
		}
		want++
	}
}
