package memlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/memlock"
)

func delayed(t *testing.T, d time.Duration) *memlock.Locker {
	t.Helper()
	l, err := memlock.NewWithOptions(memlock.Options{LockDelay: d})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A Renew racing the end of the lock-delay either fails, and the waiter
// queued before the expiry is granted no earlier than the old Deadline
// plus the delay, or succeeds, and the waiter then waits the new Deadline
// plus the delay: never is the waiter granted while the renewed grant
// still counts.
func TestRenewRacingTheLockDelayKeepsWaitersOut(t *testing.T) {
	const ttl, delay = 4 * time.Millisecond, 6 * time.Millisecond
	r := rand.New(rand.NewPCG(5, 6))
	renewed, refused := 0, 0
	for i := range 300 {
		l := delayed(t, delay)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		h, err := l.Acquire(ctx, "k", ttl)
		if err != nil {
			t.Fatal(err)
		}
		granted := make(chan time.Time, 1)
		queued := make(chan struct{})
		go func() {
			close(queued)
			w, err := l.Acquire(ctx, "k", time.Second)
			at := time.Now()
			if err != nil {
				t.Errorf("round %d: waiter: %v", i, err)
			} else {
				defer w.Release(ctx)
			}
			granted <- at
		}()
		<-queued
		// Renew somewhere around the end of the delay.
		time.Sleep(ttl + delay - 2*time.Millisecond + time.Duration(r.IntN(4000))*time.Microsecond)
		err = h.Renew(ctx)
		end := h.Deadline().Add(delay)
		switch {
		case err == nil:
			renewed++
		case errors.Is(err, locks.ErrNotHeld):
			refused++
		default:
			t.Fatal(err)
		}
		if at := <-granted; at.Before(end) {
			t.Fatalf("round %d (renew: %v): waiter granted %v before the holder's Deadline + delay", i, err, end.Sub(at))
		}
		cancel()
	}
	t.Logf("%d renewed within the delay, %d refused", renewed, refused)
}

// A Release after the Deadline but within the delay frees the lock at
// once, to the waiter queued first, and tokens still grow.
func TestReleaseWithinTheLockDelayHandsOverAtOnce(t *testing.T) {
	const ttl, delay = 10 * time.Millisecond, 2 * time.Second
	l := delayed(t, delay)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := l.Acquire(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		i   int
		tok uint64
	}
	order := make(chan got, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			w, err := l.Acquire(ctx, "k", time.Second)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			order <- got{i, uint64(w.Token())}
			_ = w.Release(ctx)
		})
		time.Sleep(5 * time.Millisecond) // queue in order
	}
	time.Sleep(time.Until(h.Deadline()) + 20*time.Millisecond)
	start := time.Now()
	if err := h.Release(ctx); err != nil {
		t.Fatalf("Release within the delay: %v", err)
	}
	wg.Wait()
	close(order)
	if took := time.Since(start); took > delay/2 {
		t.Errorf("waiters served %v after the Release", took)
	}
	last := uint64(h.Token())
	want := 0
	for g := range order {
		if g.i != want || g.tok <= last {
			t.Errorf("served waiter %d token %d; want waiter %d, token above %d", g.i, g.tok, want, last)
		}
		want++
		last = g.tok
	}
}

// Many keys expiring unreleased under a lock-delay, with acquires of other
// keys sweeping them meanwhile: none is granted again before its Deadline
// plus the delay.
func TestLockDelayHoldsAcrossManyKeysAndSweeps(t *testing.T) {
	const ttl, delay = 5 * time.Millisecond, 30 * time.Millisecond
	l := delayed(t, delay)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const n = 300
	ends := make([]time.Time, n)
	for i := range n {
		h, err := l.Acquire(ctx, fmt.Sprint("k", i), ttl)
		if err != nil {
			t.Fatal(err)
		}
		ends[i] = h.Deadline().Add(delay)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			// Fresh keys sweep old entries as they are made.
			for j := range 200 {
				h, err := l.TryAcquire(ctx, fmt.Sprint("sweep", w, "-", j), time.Millisecond)
				if err != nil {
					t.Error(err)
					return
				}
				if j%2 == 0 {
					_ = h.Release(ctx)
				}
			}
		})
		wg.Go(func() {
			for i := w; i < n; i += 4 {
				for {
					h, err := l.TryAcquire(ctx, fmt.Sprint("k", i), time.Second)
					at := time.Now()
					if errors.Is(err, locks.ErrNotObtained) {
						time.Sleep(100 * time.Microsecond)
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					if at.Before(ends[i]) {
						t.Errorf("k%d granted %v before its Deadline + delay", i, ends[i].Sub(at))
					}
					_ = h.Release(ctx)
					break
				}
			}
		})
	}
	wg.Wait()
}
