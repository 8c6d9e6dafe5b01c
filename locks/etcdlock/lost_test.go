package etcdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
)

// lostWithin waits for lease's Lost to close, failing the test after limit:
// a bound far above the few seconds it takes, for a loss that never comes.
func lostWithin(t *testing.T, lease locks.Lease, limit time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-lease.(locks.LossNotifier).Lost():
		return time.Since(start)
	case <-time.After(limit):
		t.Fatalf("Lost still open %v after %s", limit, what)
		return 0
	}
}

// watching calls Lost and waits until its watch is in place, so that what
// the test does next hits the running watch, not its start.
func watching(ctx context.Context, t *testing.T, lease locks.Lease) {
	t.Helper()
	lost := lease.(locks.LossNotifier).Lost()
	select {
	case <-etcdlock.WatchReady(lease):
	case <-lost:
		t.Fatal("Lost closed before anything happened")
	case <-ctx.Done():
		t.Fatal("the watch behind Lost never started")
	}
}

// A client talking to one member of a 3-member cluster holds a lock; the
// member is then cut off from its peers (both frozen with SIGSTOP). The
// majority could expire the holder's lease and grant the lock again, and
// the holder can no longer renew: Lost must close, within a few election
// timeouts, not wait for the local deadline. Both cases: the cut-off member
// a follower, and the leader (which steps down when it stops hearing from a
// quorum). Renew then fails with ErrNotHeld without asking; once the peers
// are back, Release still deletes the key.
func TestLostWhenMemberLosesLeader(t *testing.T) {
	t.Parallel()
	cl := etcdserver.NewCluster(t, 3)
	ctx := ctxFor(t, 3*time.Minute)
	const ttl = time.Minute // far beyond the test: no expiry ends the lease
	for _, isolate := range []string{"follower", "leader"} {
		leader, err := cl.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var member *harness.Server
		for _, m := range cl.Members {
			if (m == leader) == (isolate == "leader") {
				member = m
				break
			}
		}
		c := newClient(t, []string{member.Addr()}) // this member only
		l := newLocker(t, c, "/t/")
		lease, err := l.Acquire(ctx, "k-"+isolate, ttl)
		if err != nil {
			t.Fatal(err)
		}
		watching(ctx, t, lease)
		var others []*harness.Server
		for _, m := range cl.Members {
			if m != member {
				others = append(others, m)
			}
		}
		for _, m := range others {
			if err := m.Pause(); err != nil {
				t.Fatal(err)
			}
		}
		took := lostWithin(t, lease, 30*time.Second, "the "+isolate+" "+member.Name()+" lost its peers")
		t.Logf("%s cut off: Lost closed after %v", isolate, took)
		if err := lease.Renew(ctx); !errors.Is(err, locks.ErrNotHeld) {
			t.Errorf("Renew after Lost = %v, want ErrNotHeld", err)
		}
		for _, m := range others {
			if err := m.Resume(); err != nil {
				t.Fatal(err)
			}
		}
		releaseAfterHeal(ctx, t, lease)
	}
}

// releaseAfterHeal releases lease once its member has a leader again,
// retrying while the healed cluster still elects one.
func releaseAfterHeal(ctx context.Context, t *testing.T, lease locks.Lease) {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		err := lease.Release(rctx)
		if err == nil {
			return
		}
		if errors.Is(err, locks.ErrNotHeld) || rctx.Err() != nil {
			t.Fatalf("Release once the peers are back: %v", err)
		}
		select { // an election in progress: "no leader", or a timeout
		case <-time.After(200 * time.Millisecond):
		case <-rctx.Done():
		}
	}
}

// The watch behind Lost ending for a reason of the client's own — here the
// client is closed — leaves nothing that would report a loss: Lost closes.
func TestLostWhenWatchEnds(t *testing.T) {
	t.Parallel()
	d := etcdserver.Shared(t)
	c := newClient(t, d.Endpoints)
	l := newLocker(t, c, d.Prefix)
	ctx := ctxFor(t, time.Minute)
	lease, err := l.Acquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	watching(ctx, t, lease)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	lostWithin(t, lease, 10*time.Second, "the client was closed")
	if err := lease.Renew(ctx); !errors.Is(err, locks.ErrNotHeld) {
		t.Errorf("Renew after Lost = %v, want ErrNotHeld", err)
	}
}

// Release ends the watch behind Lost and its goroutine before it returns,
// and the channel stays open once it has.
func TestReleaseEndsLostWatch(t *testing.T) {
	// Not parallel: it counts the process's goroutines.
	d := etcdserver.Shared(t)
	c := newClient(t, d.Endpoints)
	l := newLocker(t, c, d.Prefix)
	ctx := ctxFor(t, time.Minute)
	cycle := func() locks.Lease {
		t.Helper()
		lease, err := l.Acquire(ctx, "k", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return lease
	}
	if err := cycle().Release(ctx); err != nil { // the client's connection is up before the count
		t.Fatal(err)
	}
	before := goleak.IgnoreCurrent()
	for range 3 {
		lease := cycle()
		watching(ctx, t, lease)
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The client's own stream goroutines wind down asynchronously once no
	// watch is left on them: goleak retries until they are gone.
	if err := goleak.Find(before); err != nil {
		t.Fatalf("released leases left goroutines behind: %v", err)
	}
	// A lease released before Lost was ever called: a channel that never
	// closes, and no watch.
	lease := cycle()
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.(locks.LossNotifier).Lost():
		t.Fatal("Lost closed for a lease released before it was watched")
	default:
	}
	if err := goleak.Find(before); err != nil {
		t.Fatalf("Lost after Release started a watch: %v", err)
	}
}
