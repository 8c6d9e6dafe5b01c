package frozen

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
	"github.com/fenceguard/fenceguard/locks/redislock/redlock"
	"github.com/fenceguard/fenceguard/locks/zklock"
)

// frozenRelease holds a key through g, freezes srv while a renewal is in
// flight, and checks that Release returns by its 200ms deadline. Then it
// thaws srv and checks that a second Guard gets the lock, with a higher
// token, once the first grant expired: no late renewal resurrected it.
func frozenRelease(t *testing.T, srvs []*harness.Server, l1, l2 locks.Locker, ttl, every time.Duration) {
	t.Helper()
	g := newRenewingGuard(t, l1, ttl, every)
	g2 := newRenewingGuard(t, l2, ttl, every)
	var l *guard.Lease
	key := ""
	for attempt := 1; ; attempt++ {
		key = fmt.Sprintf("k%d", attempt)
		var err error
		l, err = g.Acquire(itest.Ctx(t, 5*time.Second), key)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(every - 50*time.Millisecond)
		for _, s := range srvs {
			itest.Pause(t, s)
		}
		time.Sleep(150 * time.Millisecond) // a renewal is in flight
		if l.Context().Err() == nil {
			break
		}
		// The process stalled past the lease's deadline (or the ZooKeeper
		// client's read timeout) before Release: there is no renewal in
		// flight to cut short. Try again on another key.
		t.Logf("attempt %d: lease lost before Release (%v): the machine stalled", attempt, context.Cause(l.Context()))
		for _, s := range srvs {
			itest.Resume(t, s)
		}
		if attempt == 3 {
			t.Fatal("lease lost before Release in 3 attempts")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	tm := itest.StartTiming(t)
	rerr := l.Release(ctx)
	took, allowed := tm.Stop(200 * time.Millisecond)
	cancel()
	if took > 200*time.Millisecond+allowed {
		t.Errorf("Release took %v with a 200ms deadline, servers frozen", took)
	}
	t.Logf("Release with the servers frozen: %v after %v", rerr, took)
	// (The ZooKeeper client fails the requests in flight with
	// ErrConnectionClosed when it gives up on the frozen server's
	// connection, which on a busy machine can fall within the wait.)
	if rerr == nil || !errors.Is(rerr, context.DeadlineExceeded) && !errors.Is(rerr, zk.ErrConnectionClosed) {
		t.Errorf("Release cut short by its deadline: err = %v, want it to match context.DeadlineExceeded", rerr)
	}
	select {
	case <-l.Context().Done():
	default:
		t.Errorf("lease context not done after Release")
	}
	for _, s := range srvs {
		itest.Resume(t, s)
	}
	l2x, err := g2.Acquire(itest.Ctx(t, ttl+5*time.Second), key)
	if err != nil {
		t.Fatalf("second holder: %v", err)
	}
	if l2x.Token() <= l.Token() {
		t.Errorf("second holder's token %v not above the first's %v", l2x.Token(), l.Token())
	}
	if err := l2x.Release(itest.Ctx(t, 2*time.Second)); err != nil {
		t.Errorf("second holder's release: %v", err)
	}
}

func TestGuardReleaseFrozenEtcd(t *testing.T) {
	t.Parallel()
	srv := etcdserver.New(t)
	frozenRelease(t, []*harness.Server{srv}, etcdLocker(t, srv.Addr()), etcdLocker(t, srv.Addr()), 2*time.Second, 400*time.Millisecond)
}

func zkLocker(t *testing.T, addr string) *zklock.Locker {
	t.Helper()
	l, err := zklock.New([]string{addr}, zklock.Options{Prefix: "/fg/lock", Logger: itest.QuietZK{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func TestGuardReleaseFrozenZooKeeper(t *testing.T) {
	t.Parallel()
	srv := zkserver.New(t)
	frozenRelease(t, []*harness.Server{srv}, zkLocker(t, srv.Addr()), zkLocker(t, srv.Addr()), 2*time.Second, 400*time.Millisecond)
}

func redlockLocker(t *testing.T, srvs []*harness.Server) *redlock.Locker {
	t.Helper()
	var nodes []redlock.Client
	for _, s := range srvs {
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		nodes = append(nodes, c)
	}
	l, err := redlock.New(nodes, redlock.Options{Prefix: "fg"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func TestGuardReleaseFrozenRedlock(t *testing.T) {
	t.Parallel()
	srvs := redisserver.NewN(t, 3)
	frozenRelease(t, srvs, redlockLocker(t, srvs), redlockLocker(t, srvs), 3*time.Second, 600*time.Millisecond)
}

// etcd frozen while a renewal (a keep-alive of the grant's lease, maybe
// pooled) is in flight, Release cut short, etcd thawed at once: the
// grant's key must be gone by the released lease's deadline; a keep-alive
// etcd read from its socket after the thaw would keep it a TTL longer.
func TestGuardEtcdLateKeepAliveAfterRelease(t *testing.T) {
	t.Parallel()
	srv := etcdserver.New(t)
	const ttl, every = 2 * time.Second, 400 * time.Millisecond
	g := newRenewingGuard(t, etcdLocker(t, srv.Addr()), ttl, every)
	g2 := newRenewingGuard(t, etcdLocker(t, srv.Addr()), ttl, every)
	l, err := g.Acquire(itest.Ctx(t, 5*time.Second), "k")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(every - 50*time.Millisecond)
	itest.Pause(t, srv)
	time.Sleep(150 * time.Millisecond) // the renewal is in flight
	dl := l.Deadline()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	rerr := l.Release(ctx)
	cancel()
	t.Logf("Release with etcd frozen: %v", rerr)
	itest.Resume(t, srv)
	if el, ok := locks.LeaseAs[*etcdlock.Lease](l.Unwrap()); ok {
		raw := etcdClient(t, srv.Addr())
		time.Sleep(50 * time.Millisecond)
		if r, err := raw.TimeToLive(itest.Ctx(t, 2*time.Second), el.LeaseID()); err == nil {
			t.Logf("after the thaw: lease TTL left %ds, the holder's deadline in %v", r.TTL, time.Until(dl).Round(time.Millisecond))
			if time.Duration(r.TTL)*time.Second > time.Until(dl)+time.Second {
				t.Errorf("lease has %ds left, the holder's deadline is in %v: a keep-alive landed after Release returned", r.TTL, time.Until(dl))
			}
		}
	}
	l2, err := g2.Acquire(itest.Ctx(t, ttl+5*time.Second), "k")
	if err != nil {
		t.Fatalf("second holder: %v", err)
	}
	late := time.Since(dl)
	t.Logf("second holder got the lock %v after the released lease's deadline", late)
	if l2.Token() <= l.Token() {
		t.Errorf("second holder's token %v not above the first's %v", l2.Token(), l.Token())
	}
	_ = l2.Release(itest.Ctx(t, 2*time.Second))
	// etcd expires leases on its leader's clock, in whole seconds (TTL 2s
	// asked: 2s, from the last keep-alive it served): allow a second.
	if late > time.Second+500*time.Millisecond {
		t.Errorf("the lock stayed taken %v past the released lease's deadline: a late keep-alive extended it", late)
	}
}

func etcdLocker(t *testing.T, addr string) *etcdlock.Locker {
	t.Helper()
	l, err := etcdlock.New(etcdClient(t, addr), etcdlock.Options{Prefix: "/fg/"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}
