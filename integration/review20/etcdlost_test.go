package review20

import (
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/internal/servers"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
)

// TestEtcdLostReturnsWhileFrozen: etcdlock's Lease.Lost (a
// locks.LossNotifier, which package guard calls from the keep-alive
// goroutine before its first renewal) opens its watch synchronously:
// s.c.Watch at locks/etcdlock/etcdlock.go:636 runs inside watchOnce.Do,
// and clientv3's Watch blocks until its watch stream is up (watch.go:375)
// — for as long as etcd does not answer, with a context nothing cancels
// but Release. So Lost does not return while etcd is frozen; guard's
// keep-alive never starts renewing, and guard's Lease.Release, which waits
// for the keep-alive goroutine (guard/lease.go:226), hangs past its
// deadline until etcd answers again (TestHeldGuardFrozen/etcdlock/Release*:
// Do with a 60s parent returned after 56s).
func TestEtcdLostReturnsWhileFrozen(t *testing.T) {
	srv := servers.NewEtcd(t)
	c := etcdClient(t, srv.Addr())
	l, err := etcdlock.New(c, etcdlock.Options{Prefix: "/r20/lock/"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ll, err := l.Acquire(ctxFor(t, 10*time.Second), "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lease := ll.(*etcdlock.Lease)
	pause(t, srv)
	got := make(chan (<-chan struct{}), 1)
	go func() { got <- lease.Lost() }()
	returned := false
	select {
	case <-got:
		returned = true
	case <-time.After(time.Second):
		t.Error("Lease.Lost has not returned 1s after it was called, etcd frozen")
	}
	byDeadlineOrLost(t, "etcdlock Lease.Release after Lost, etcd frozen", 300*time.Millisecond, func() { srv.Resume() }, lease.Release)
	resume(t, srv)
	if !returned {
		<-got
	}
	var _ locks.LossNotifier = lease
}
