package etcdlease

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
)

func etcdLease(t *testing.T, l *etcdlock.Locker, key string) *etcdlock.Lease {
	t.Helper()
	ls, err := l.Acquire(itest.Ctx(t, 5*time.Second), key, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	el, ok := ls.(*etcdlock.Lease)
	if !ok {
		t.Fatalf("lease is %T", ls)
	}
	return el
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

func closedWithin(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// The key deleted right after Lost is called, before its goroutine opened
// the watch, and before Lost is called at all: both reported.
func TestLostDeletionRightAfterLost(t *testing.T) {
	db := etcdserver.Shared(t)
	l := etcdLocker(t, db.Endpoints[0])
	raw := etcdClient(t, db.Endpoints[0])
	for i := 0; i < 5; i++ {
		s := etcdLease(t, l, "after")
		ch := s.Lost()
		if _, err := raw.Delete(itest.Ctx(t, 2*time.Second), s.OwnKey()); err != nil {
			t.Fatal(err)
		}
		if !closedWithin(ch, 3*time.Second) {
			t.Fatalf("round %d: key deleted right after Lost: not reported in 3s", i)
		}
		if err := s.Renew(itest.Ctx(t, time.Second)); err == nil {
			t.Errorf("round %d: Renew after Lost closed succeeded", i)
		}
		_ = s.Release(itest.Ctx(t, time.Second))
	}
	s := etcdLease(t, l, "before")
	if _, err := raw.Delete(itest.Ctx(t, 2*time.Second), s.OwnKey()); err != nil {
		t.Fatal(err)
	}
	if !closedWithin(s.Lost(), 3*time.Second) {
		t.Fatal("key deleted before Lost: not reported in 3s")
	}
	_ = s.Release(itest.Ctx(t, time.Second))
}

// Release right after Lost, Lost after Release, and concurrent Lost calls:
// Release returns promptly, Lost after Release does not block, every call
// returns the same channel, and no goroutine outlives the release.
func TestLostReleaseOrders(t *testing.T) {
	db := etcdserver.Shared(t)
	l := etcdLocker(t, db.Endpoints[0])
	warm := etcdLease(t, l, "warm") // the client's connection is up before the baseline
	if err := warm.Release(itest.Ctx(t, 2*time.Second)); err != nil {
		t.Fatal(err)
	}
	base := goleak.IgnoreCurrent()
	for i := 0; i < 5; i++ {
		s := etcdLease(t, l, "rel")
		_ = s.Lost()
		start := time.Now()
		if err := s.Release(itest.Ctx(t, 2*time.Second)); err != nil {
			t.Fatalf("Release right after Lost: %v", err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("Release right after Lost took %v", took)
		}

		s = etcdLease(t, l, "rel")
		if err := s.Release(itest.Ctx(t, 2*time.Second)); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = s.Lost(); close(done) }()
		if !closedWithin(done, time.Second) {
			t.Fatal("Lost after Release blocked")
		}

		s = etcdLease(t, l, "conc")
		var wg sync.WaitGroup
		chans := make([]<-chan struct{}, 8)
		for j := range chans {
			wg.Add(1)
			go func() { defer wg.Done(); chans[j] = s.Lost() }()
		}
		wg.Wait()
		for j := range chans {
			if chans[j] != chans[0] {
				t.Fatalf("concurrent Lost calls returned different channels")
			}
		}
		if closedWithin(chans[0], 200*time.Millisecond) {
			t.Errorf("Lost closed while the grant is held")
		}
		if err := s.Release(itest.Ctx(t, 2*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	goleak.VerifyNone(t, base)
}

// Frozen etcd: Lost returns at once, Release returns by its deadline, and
// after the thaw the grant's expiry is reported or the watch ends: no
// goroutine is left.
func TestLostAndReleaseWhileFrozen(t *testing.T) {
	srv := etcdserver.New(t)
	l := etcdLocker(t, srv.Addr())
	s := etcdLease(t, l, "frozen")
	itest.Pause(t, srv)
	tm := itest.StartTiming(t)
	ch := s.Lost()
	if took, allowed := tm.StopAllowing(100*time.Millisecond, 0); took > allowed {
		t.Errorf("Lost took %v with etcd frozen (allowed %v)", took, allowed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	tm = itest.StartTiming(t)
	err := s.Release(ctx)
	cancel()
	if took, allowed := tm.Stop(200 * time.Millisecond); took > 200*time.Millisecond+allowed {
		t.Errorf("Release took %v with a 200ms deadline, etcd frozen", took)
	}
	if err == nil {
		t.Errorf("Release over a frozen etcd returned nil")
	}
	itest.Resume(t, srv)
	// The release failed: the key stays until its lease expires (2s TTL),
	// and Lost must report that.
	if !closedWithin(ch, 5*time.Second) {
		t.Errorf("the unreleased grant's expiry after the thaw: Lost not closed in 5s")
	}
	_ = s.Release(itest.Ctx(t, 2*time.Second))
}

// The grant's lease revoked (its key expires with it) right after Lost is
// called: reported.
func TestLostExpiryRightAfterLost(t *testing.T) {
	db := etcdserver.Shared(t)
	l := etcdLocker(t, db.Endpoints[0])
	raw := etcdClient(t, db.Endpoints[0])
	for i := 0; i < 3; i++ {
		s := etcdLease(t, l, "expiry")
		ch := s.Lost()
		if _, err := raw.Revoke(itest.Ctx(t, 2*time.Second), s.LeaseID()); err != nil {
			t.Fatal(err)
		}
		if !closedWithin(ch, 3*time.Second) {
			t.Fatalf("round %d: lease revoked right after Lost: not reported in 3s", i)
		}
		_ = s.Release(itest.Ctx(t, time.Second))
	}
}
