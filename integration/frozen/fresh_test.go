package frozen

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks/zklock"
)

// TestZKFreshLockerFrozen: a zklock Locker with no session yet (its
// first call opens one) against a frozen server: Issued, TryAcquire and
// Acquire return by their context's deadline, not by the session wait
// (Options.SessionWait, 5s) or Issued's 10s session timeout.
func TestZKFreshLockerFrozen(t *testing.T) {
	t.Parallel()
	srv := zkserver.New(t)
	conn := zkConn(t, srv.Addr()) // the server is up and serving
	_ = conn
	itest.Pause(t, srv)
	var lockers []*zklock.Locker
	for i, d := range []time.Duration{100 * time.Millisecond, 400 * time.Millisecond} {
		l, err := zklock.New([]string{srv.Addr()}, zklock.Options{Prefix: "/fg/fresh", Logger: itest.QuietZK{}})
		if err != nil {
			t.Fatal(err)
		}
		calls := map[string]func(ctx context.Context) error{
			"Issued":     func(ctx context.Context) error { _, err := l.Issued(ctx, "k"); return err },
			"TryAcquire": func(ctx context.Context) error { _, err := l.TryAcquire(ctx, "k", 2*time.Second); return err },
			"Acquire":    func(ctx context.Context) error { _, err := l.Acquire(ctx, "k", 2*time.Second); return err },
		}
		for name, call := range calls {
			byDeadline(t, fmt.Sprintf("fresh zklock %s #%d", name, i), d, call)
		}
		lockers = append(lockers, l)
	}
	// Close has no context and promises no bound; how long it takes with
	// the server frozen is logged, up to 2s, when the server is thawed.
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- lockers[0].Close() }()
	select {
	case <-done:
		t.Logf("Close of a fresh locker on a frozen server took %v", time.Since(start))
		itest.Resume(t, srv)
	case <-time.After(2 * time.Second):
		t.Logf("Close of a fresh locker on a frozen server: not returned after 2s")
		itest.Resume(t, srv)
		<-done
		t.Logf("Close returned %v after it began, the server thawed at 2s", time.Since(start))
	}
	for _, l := range lockers[1:] {
		l.Close()
	}
}
