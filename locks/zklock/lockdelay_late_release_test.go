package zklock_test

import (
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/locks"
)

// A Release that comes after the lease's Deadline but within the
// lock-delay — a holder that let go late — frees the lock at once: the
// waiter queued behind it does not wait for the rest of the delay.
func TestReleaseWithinTheLockDelayFreesTheLock(t *testing.T) {
	z := zkserver.Shared(t)
	const ttl, delay = 2 * time.Second, 3 * time.Second
	newL := func() locks.Locker { return newDelayLocker(t, z.Addrs, z.Chroot+"/locks", delay) }
	ctx := ctxFor(t, 30*time.Second)
	holderL, waiterL := newL(), newL()
	h, err := holderL.TryAcquire(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	granted := make(chan time.Time, 1)
	go func() {
		w, err := waiterL.Acquire(ctx, "k", 5*time.Second)
		granted <- time.Now()
		if err != nil {
			t.Errorf("waiter: %v", err)
			return
		}
		if w.Token() <= h.Token() {
			t.Errorf("waiter's token %d, holder's %d", w.Token(), h.Token())
		}
		_ = w.Release(ctx)
	}()
	time.Sleep(time.Until(h.Deadline()) + 300*time.Millisecond)
	end := h.Deadline().Add(delay)
	released := time.Now()
	err = h.Release(ctx)
	at := <-granted
	t.Logf("Release %v after the Deadline: %v; waiter granted %v after it", released.Sub(h.Deadline()), err, at.Sub(released))
	if at.Before(released) {
		t.Errorf("waiter granted %v before the release, within the delay", released.Sub(at))
	}
	if !at.Before(end) {
		t.Errorf("waiter granted only %v after the Deadline + delay: the late Release did not free the lock", at.Sub(end))
	}
}
