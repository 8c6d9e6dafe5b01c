package memlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/token"
)

// fakeClock is a clock that moves only when told to.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type nameKey struct{}

// named returns ctx naming its waiter for the hook.
func named(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, nameKey{}, name)
}

// hooks drives the waiters of one Locker: every wait is reported on
// waiting by the waiter's name, and the waiter named in park stops at
// the hook point given, once, until resume is closed.
type hooks struct {
	waiting chan string
	parked  chan struct{}
	resume  chan struct{}
	once    sync.Once
}

func installHooks(l *memlock.Locker, parkName, parkAt string) *hooks {
	h := &hooks{waiting: make(chan string, 16), parked: make(chan struct{}), resume: make(chan struct{})}
	memlock.SetHook(l, func(ctx context.Context, at string) {
		name, _ := ctx.Value(nameKey{}).(string)
		if name == parkName && at == parkAt {
			parkedNow := false
			h.once.Do(func() { parkedNow = true })
			if parkedNow {
				close(h.parked)
				<-h.resume
			}
		}
		if at == memlock.WaitHook {
			h.waiting <- name
		}
	})
	return h
}

type result struct {
	lease locks.Lease
	err   error
}

// acquireAsync starts a waiting Acquire under name and returns where its
// result will come.
func acquireAsync(ctx context.Context, l *memlock.Locker, name, key string, ttl time.Duration) chan result {
	res := make(chan result, 1)
	go func() {
		lease, err := l.Acquire(named(ctx, name), key, ttl)
		res <- result{lease, err}
	}()
	return res
}

func expectWaiting(t *testing.T, h *hooks, want string) {
	t.Helper()
	if got := <-h.waiting; got != want {
		t.Fatalf("%s waits, want %s", got, want)
	}
}

// awaitWaiting waits until want reaches a wait, passing over the waits of
// others: a queued waiter whose timer is re-armed after the clock moved
// waits once more, at a moment the test does not control.
func awaitWaiting(t *testing.T, h *hooks, want string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case got := <-h.waiting:
			if got == want {
				return
			}
		case <-timeout:
			t.Fatalf("%s never waits", want)
		}
	}
}

// A waiter handed the lock while it was not scheduled, and resumed after
// that grant ran out and the lock moved on, must not return the dead
// grant: it waits again, and later gets a grant of its own.
func TestGrantExpiredBeforeTakenIsNotReturned(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name  string
		other bool // a second waiter takes the lock meanwhile
	}{
		{"another waiter took over", true},
		{"nobody else waits", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := memlock.New()
			clk := newFakeClock()
			memlock.SetClock(l, clk.Now)
			h := installHooks(l, "w1", memlock.GrantHook)

			holder, err := l.Acquire(ctx, "k", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			res1 := acquireAsync(ctx, l, "w1", "k", time.Hour)
			expectWaiting(t, h, "w1")
			var res2 chan result
			if tt.other {
				res2 = acquireAsync(ctx, l, "w2", "k", time.Hour)
				expectWaiting(t, h, "w2")
			}
			if err := holder.Release(ctx); err != nil { // the lock goes to w1 ...
				t.Fatal(err)
			}
			<-h.parked // ... which took it from its channel and stops there
			clk.Advance(2 * time.Hour)

			var w2 locks.Lease
			if tt.other {
				// Any use of the key expires w1's grant and hands over to w2.
				if _, err := l.TryAcquire(ctx, "k", time.Hour); !errors.Is(err, locks.ErrNotObtained) {
					t.Fatalf("TryAcquire while w2 is due: %v, want ErrNotObtained", err)
				}
				r := <-res2
				if r.err != nil {
					t.Fatal(r.err)
				}
				w2 = r.lease
			}
			close(h.resume)

			if tt.other {
				select {
				case r := <-res1:
					t.Fatalf("w1 returned token %d (err %v) while w2 holds the lock with %d", tokenOf(r.lease), r.err, w2.Token())
				case name := <-h.waiting:
					if name != "w1" {
						t.Fatalf("%s waits, want w1", name)
					}
				}
				if cur, _ := l.Current(ctx, "k"); cur != w2.Token() {
					t.Fatalf("Current %d, want w2's %d", cur, w2.Token())
				}
				if err := w2.Release(ctx); err != nil {
					t.Fatalf("w2's release: %v", err)
				}
			}
			r := <-res1
			if r.err != nil {
				t.Fatal(r.err)
			}
			defer r.lease.Release(ctx)
			if tt.other && r.lease.Token() <= w2.Token() {
				t.Errorf("w1's token %d is not above w2's %d", r.lease.Token(), w2.Token())
			}
			if !r.lease.Deadline().After(clk.Now()) {
				t.Errorf("w1's lease is dead on arrival: deadline %v, now %v", r.lease.Deadline(), clk.Now())
			}
			if err := r.lease.Renew(ctx); err != nil {
				t.Errorf("w1 cannot renew the lease it was given: %v", err)
			}
			if cur, _ := l.Current(ctx, "k"); cur != r.lease.Token() {
				t.Errorf("Current %d, want w1's %d", cur, r.lease.Token())
			}
		})
	}
}

func tokenOf(l locks.Lease) token.Token {
	if l == nil {
		return 0
	}
	return l.Token()
}

// A waiter that gives up while a grant that already ran out sits in its
// channel must not hand the lock over again: the holder that took over
// keeps it, and the next waiter stays queued.
func TestAbandonWithExpiredGrantKeepsHolder(t *testing.T) {
	ctx := context.Background()
	l := memlock.New()
	clk := newFakeClock()
	memlock.SetClock(l, clk.Now)
	h := installHooks(l, "w1", memlock.WaitHook)

	holder, err := l.Acquire(ctx, "k", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ctx1, cancel1 := context.WithCancel(ctx)
	defer cancel1()
	res1 := acquireAsync(ctx1, l, "w1", "k", time.Hour)
	<-h.parked // w1 is queued, and stopped before it waits
	res2 := acquireAsync(ctx, l, "w2", "k", time.Hour)
	expectWaiting(t, h, "w2")
	res3 := acquireAsync(ctx, l, "w3", "k", time.Hour)
	expectWaiting(t, h, "w3")

	if err := holder.Release(ctx); err != nil { // w1's grant lands in its channel
		t.Fatal(err)
	}
	clk.Advance(2 * time.Hour) // and runs out before w1 runs
	if _, err := l.TryAcquire(ctx, "k", time.Hour); !errors.Is(err, locks.ErrNotObtained) {
		t.Fatalf("TryAcquire: %v, want ErrNotObtained", err)
	}
	r2 := <-res2
	if r2.err != nil {
		t.Fatal(r2.err)
	}
	cancel1()
	close(h.resume) // w1 finds both its grant and its cancellation
	awaitWaiting(t, h, "w1")
	if r := <-res1; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("w1: token %d, err %v; want context.Canceled", tokenOf(r.lease), r.err)
	}
	if cur, _ := l.Current(ctx, "k"); cur != r2.lease.Token() {
		t.Fatalf("Current %d, want w2's %d: the lock was handed over behind w2's back", cur, r2.lease.Token())
	}
	if err := r2.lease.Release(ctx); err != nil {
		t.Fatalf("w2's release: %v", err)
	}
	r3 := <-res3
	if r3.err != nil {
		t.Fatal(r3.err)
	}
	if r3.lease.Token() <= r2.lease.Token() {
		t.Errorf("w3's token %d is not above w2's %d", r3.lease.Token(), r2.lease.Token())
	}
	if err := r3.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := memlock.Len(l); n != 0 {
		t.Errorf("%d keys left", n)
	}
}

// A waiter times the expiry of whoever holds the lock now: after a release
// hands the lock to a waiter with a short lease, the next waiter takes
// over when that lease runs out, not when the first holder's would have.
func TestWaiterTimesTheExpiryOfTheHandedOverGrant(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := memlock.New()
	holder, err := l.Acquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	short := make(chan locks.Lease, 1)
	go func() {
		lease, err := l.Acquire(ctx, "k", 100*time.Millisecond)
		if err != nil {
			t.Error(err)
		}
		short <- lease
	}()
	time.Sleep(50 * time.Millisecond) // let it queue first; nothing to observe
	next := make(chan time.Time, 1)
	go func() {
		lease, err := l.Acquire(ctx, "k", time.Minute)
		if err != nil {
			t.Error(err)
			next <- time.Time{}
			return
		}
		next <- time.Now()
		_ = lease.Release(ctx)
	}()
	time.Sleep(50 * time.Millisecond)
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-short
	if w == nil {
		t.FailNow()
	}
	at := <-next
	if late := at.Sub(w.Deadline()); late > time.Second {
		t.Errorf("next waiter granted %v after the handed-over lease ran out", late)
	}
}
