package frozen

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
)

func releaseDuringRenewal(t *testing.T, g *guard.Guard, srv *harness.Server, ttl time.Duration) {
	// The precondition, a lease still held with a renewal in flight, needs
	// the service frozen for a third of the TTL without the session ending;
	// a machine that stalls for longer than that ends it (ZooKeeper's
	// client gives up on a silent server after two thirds of the session
	// timeout). Such a try proves nothing either way: it is made again.
	const tries = 3
	for i := 1; ; i++ {
		lease, err := g.Acquire(itest.Ctx(t, 20*time.Second), "renewing")
		if err != nil {
			t.Fatal(err)
		}
		itest.Pause(t, srv)
		// The keep-alive renews every TTL/3: wait until one renewal is in
		// flight (sent to the frozen service), well before the local deadline.
		time.Sleep(ttl/3 + 100*time.Millisecond)
		if err := lease.Context().Err(); err != nil {
			itest.Resume(t, srv)
			if i == tries {
				t.Fatalf("lease lost before the test in %d tries; last: %v", tries, context.Cause(lease.Context()))
			}
			t.Logf("try %d: lease lost before the test (%v): again", i, context.Cause(lease.Context()))
			_ = lease.Release(itest.Ctx(t, 10*time.Second))
			warm(t, g)
			continue
		}
		err = itest.ReturnsByDeadline(t, "Lease.Release during a renewal to a frozen service", 200*time.Millisecond, func() { srv.Resume() }, lease.Release)
		if err == nil {
			t.Error("Release on a frozen service succeeded")
		} else if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, guard.ErrLost) && !errors.Is(err, zk.ErrConnectionClosed) {
			// (The ZooKeeper client fails the requests in flight with
			// ErrConnectionClosed when it gives up on the frozen server's
			// connection, which on a busy machine can fall in the wait.)
			t.Errorf("Release: %v, want the deadline, the loss or the connection given up", err)
		}
		itest.Resume(t, srv)
		return
	}
}
