package zklock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/locks"
)

// A holder whose connection is cut or goes silent right after a renewal
// loses its lease, but nobody else — neither a waiter queued before nor a
// TryAcquire polling — is granted the lock before its Deadline plus the
// lock-delay, whether the session survives (the connection restored) or
// expires; and the next grant's token is larger.
func TestLockDelayOutlastsALostConnection(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		fault   func(*harness.Proxy) error
		restore bool
	}{
		{"cut, session kept", (*harness.Proxy).Cut, true},
		{"silent, session expired", (*harness.Proxy).Blackhole, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			z := zkserver.Shared(t)
			ctx := ctxFor(t, 30*time.Second)
			p := harness.NewProxy(t, z.Addrs[0])
			prefix := z.Chroot + "/locks"
			holder := newDelayLocker(t, []string{p.Addr()}, prefix, lockDelay)
			waiting := newDelayLocker(t, z.Addrs, prefix, lockDelay)
			poller := newDelayLocker(t, z.Addrs, prefix, lockDelay)
			const ttl = 2 * time.Second
			h, err := holder.TryAcquire(ctx, "k", ttl)
			if err != nil {
				t.Fatal(err)
			}
			granted := make(chan time.Time, 1)
			go func() {
				w, err := waiting.Acquire(ctx, "k", ttl)
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
			time.Sleep(300 * time.Millisecond)
			if err := h.Renew(ctx); err != nil {
				t.Fatal(err)
			}
			if err := tc.fault(p); err != nil {
				t.Fatal(err)
			}
			end := h.Deadline().Add(lockDelay)
			if tc.restore {
				time.Sleep(200 * time.Millisecond)
				if err := p.Restore(); err != nil {
					t.Fatal(err)
				}
			}
			for {
				l, err := poller.TryAcquire(ctx, "k", ttl)
				at := time.Now()
				if err == nil {
					_ = l.Release(ctx)
					if at.Before(end) {
						t.Errorf("TryAcquire granted %v before the Deadline + delay", end.Sub(at))
					}
					break
				}
				if !errors.Is(err, locks.ErrNotObtained) {
					t.Fatal(err)
				}
				if at.After(end.Add(15 * time.Second)) {
					t.Fatalf("still held %v after the Deadline + delay", at.Sub(end))
				}
				time.Sleep(20 * time.Millisecond)
			}
			if at := <-granted; at.Before(end) {
				t.Errorf("waiter granted %v before the Deadline + delay", end.Sub(at))
			}
			_ = p.Restore() // the holder's locker closes without waiting out its session
			select {
			case <-h.(locks.LossNotifier).Lost():
			default:
				t.Error("the holder's lease is not reported lost")
			}
		})
	}
}
