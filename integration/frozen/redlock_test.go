package frozen

import (
	"errors"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks/redislock/redlock"
)

// TestGuardRedlockFrozen: guard over redlock, every node frozen while
// a renewal is in flight and after the lease is lost: Release returns by
// its deadline (redlock bounds each node call by NodeTimeout, a deadline,
// so its renewals end whatever go-redis does with a cancel, unlike
// redislock's: see TestRedisCancelHonoured).
func TestGuardRedlockFrozen(t *testing.T) {
	t.Parallel()
	nodes := redisserver.NewN(t, 3)
	var clients []redlock.Client
	for _, n := range nodes {
		clients = append(clients, redisClient(t, n.Addr()))
	}
	l, err := redlock.New(clients, redlock.Options{Prefix: "fg:rl:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	const ttl = 1500 * time.Millisecond
	g := newGuard(t, l, ttl)
	freeze := func() {
		for _, n := range nodes {
			itest.Pause(t, n)
		}
	}
	thaw := func() {
		for _, n := range nodes {
			_ = n.Resume()
		}
	}

	// A renewal in flight.
	lease, err := g.Acquire(itest.Ctx(t, 10*time.Second), "renewing")
	if err != nil {
		t.Fatal(err)
	}
	freeze()
	time.Sleep(ttl/3 + 100*time.Millisecond)
	err = itest.ReturnsByDeadline(t, "Release during a renewal, redlock frozen", 200*time.Millisecond, thaw, lease.Release)
	if err == nil {
		t.Error("Release on frozen nodes succeeded")
	}
	thaw()

	// A lease lost while frozen.
	lease, err = g.Acquire(itest.Ctx(t, 10*time.Second), "lost")
	if err != nil {
		t.Fatal(err)
	}
	freeze()
	<-lease.Context().Done()
	err = itest.ReturnsByDeadline(t, "Release of a lost lease, redlock frozen", 300*time.Millisecond, thaw, lease.Release)
	if !errors.Is(err, guard.ErrLost) {
		t.Errorf("Release of a lost lease: %v, want ErrLost", err)
	}
	thaw()
}
