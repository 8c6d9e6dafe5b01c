package etcdlease

import (
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
)

// TestLostReturnsWhileFrozen: etcdlock's Lease.Lost (a
// locks.LossNotifier, which package guard calls from its keep-alive
// goroutine before the first renewal) returns at once with etcd frozen: it
// opens its watch in a goroutine of its own, since clientv3's Watch blocks
// until its stream is up. Release after it returns by its deadline.
func TestLostReturnsWhileFrozen(t *testing.T) {
	srv := etcdserver.New(t)
	c := etcdClient(t, srv.Addr())
	l, err := etcdlock.New(c, etcdlock.Options{Prefix: "/fg/lock/"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ll, err := l.Acquire(itest.Ctx(t, 10*time.Second), "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lease := ll.(*etcdlock.Lease)
	itest.Pause(t, srv)
	got := make(chan (<-chan struct{}), 1)
	go func() { got <- lease.Lost() }()
	returned := false
	select {
	case <-got:
		returned = true
	case <-time.After(time.Second):
		t.Error("Lease.Lost has not returned 1s after it was called, etcd frozen")
	}
	itest.ReturnsByDeadline(t, "etcdlock Lease.Release after Lost, etcd frozen", 300*time.Millisecond, func() { srv.Resume() }, lease.Release)
	itest.Resume(t, srv)
	if !returned {
		<-got
	}
	var _ locks.LossNotifier = lease
}
