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
	lease, err := g.Acquire(context.Background(), "renewing")
	if err != nil {
		t.Fatal(err)
	}
	itest.Pause(t, srv)
	// The keep-alive renews every TTL/3: wait until one renewal is in
	// flight (sent to the frozen service), well before the local deadline.
	time.Sleep(ttl/3 + 100*time.Millisecond)
	if err := lease.Context().Err(); err != nil {
		t.Fatalf("lease lost before the test: %v", context.Cause(lease.Context()))
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
}
