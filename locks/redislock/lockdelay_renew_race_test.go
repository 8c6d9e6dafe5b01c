package redislock_test

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock"
)

// A Renew racing the end of the lock-delay either fails, and the waiter
// queued before the expiry is granted no earlier than the old Deadline
// plus the delay, or succeeds, and the waiter then waits for the new
// Deadline plus the delay: the waiter never holds the lock while the
// renewed grant still counts.
func TestRenewRacingTheLockDelayKeepsWaitersOut(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	ctx := ctxFor(t, time.Minute)
	const ttl, delay = 20 * time.Millisecond, 30 * time.Millisecond
	o := redislock.Options{Prefix: db.Prefix, LockDelay: delay}
	holderL := newLocker(t, newClient(t, db.Addr), o)
	waiterL := newLocker(t, newClient(t, db.Addr), o)
	r := rand.New(rand.NewPCG(8, 1))
	renewed, refused := 0, 0
	for i := range 60 {
		h, err := holderL.TryAcquire(ctx, "k", ttl)
		if err != nil {
			t.Fatal(err)
		}
		granted := make(chan time.Time, 1)
		done := make(chan struct{})
		go func() {
			defer close(done)
			w, err := waiterL.Acquire(ctx, "k", time.Second)
			granted <- time.Now()
			if err != nil {
				t.Errorf("round %d: waiter: %v", i, err)
				return
			}
			_ = w.Release(ctx)
		}()
		time.Sleep(time.Until(h.Deadline().Add(delay)) - 5*time.Millisecond + time.Duration(r.IntN(10000))*time.Microsecond)
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
		<-done
	}
	t.Logf("%d renewed within the delay, %d refused", renewed, refused)
}
