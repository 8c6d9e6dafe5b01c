package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
	"github.com/fenceguard/fenceguard/locks/etcdlock/internal/cleanup"
)

// keysGone waits, for as long as a background clean-up may run and a
// margin, until nothing is left under prefix, and fails the test with what
// is left otherwise.
func keysGone(t *testing.T, prefix string, list func() []string) {
	t.Helper()
	deadline := time.Now().Add(cleanup.Timeout + time.Second)
	for {
		keys := list()
		if len(keys) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("keys left under %s %v after the clean-ups' bound: %v", prefix, cleanup.Timeout, keys)
			return
		}
		time.Sleep(20 * time.Millisecond) // etcd has no event for "no key under a prefix"
	}
}

// Acquires and TryAcquires on one Locker with contexts that end at random
// points — before the lease, during the join's transaction, while the
// reply is on its way, while queued, as the turn arrives — on a key that
// another worker takes and releases all along. Every call either returns a
// grant, which then holds the lock alone, or leaves nothing behind: once
// the clean-ups' bound has passed, no key is left under the prefix, and the
// key is free at once.
func TestAcquiresCancelledAtRandomPointsLeaveNothingBehind(t *testing.T) {
	t.Parallel()
	db := etcdserver.Shared(t)
	cli := identityClient(t, db)
	l := identityLocker(t, cli, db.Prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list := func() []string { return keysUnder(t, ctx, cli, db.Prefix) }

	const ttl = 10 * time.Second // far above the test's waits: a key left behind shows
	var (
		inside            atomic.Int32
		calls, granted    atomic.Int64
		cancelled, others atomic.Int64
	)
	errs := make(chan error, 64)
	report := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	hold := func(g locks.Lease) {
		if n := inside.Add(1); n != 1 {
			report(fmt.Errorf("%d holders at once", n))
		}
		el, _ := locks.LeaseAs[*etcdlock.Lease](g)
		resp, err := cli.Txn(ctx).If(el.IsOwner()).Commit()
		if err != nil {
			report(err)
		} else if !resp.Succeeded {
			report(fmt.Errorf("grant %d does not hold the lock", g.Token()))
		}
		inside.Add(-1)
		if err := g.Release(ctx); err != nil {
			report(fmt.Errorf("release %d: %w", g.Token(), err))
		}
	}
	stop := time.Now().Add(8 * time.Second)
	var wg sync.WaitGroup
	wg.Go(func() { // a holder that keeps the key busy, so that callers queue
		for time.Now().Before(stop) {
			g, err := l.Acquire(ctx, "cancelled", ttl)
			if err != nil {
				report(fmt.Errorf("holder: %w", err))
				return
			}
			time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
			hold(g)
			time.Sleep(time.Duration(rand.IntN(5000)) * time.Microsecond) // the key free now and then
		}
	})
	for w := 0; w < 4; w++ {
		wg.Go(func() {
			for time.Now().Before(stop) {
				calls.Add(1)
				acquire := l.Acquire
				if rand.IntN(4) == 0 {
					acquire = l.TryAcquire
				}
				cctx, ccancel := context.WithCancel(ctx)
				d := time.Duration(rand.IntN(6000)) * time.Microsecond
				if rand.IntN(3) == 0 {
					d = time.Duration(rand.IntN(30000)) * time.Microsecond
				}
				timer := time.AfterFunc(d, ccancel)
				g, err := acquire(cctx, "cancelled", ttl)
				timer.Stop()
				ccancel()
				switch {
				case err == nil:
					granted.Add(1)
					hold(g)
				case errors.Is(err, context.Canceled):
					cancelled.Add(1)
				case errors.Is(err, locks.ErrNotObtained):
					others.Add(1)
				default:
					report(fmt.Errorf("acquire: %w", err))
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d calls: %d granted, %d cancelled, %d not obtained", calls.Load(), granted.Load(), cancelled.Load(), others.Load())
	if cancelled.Load() < 100 {
		t.Errorf("only %d calls were cancelled: the case under test hardly arose", cancelled.Load())
	}
	keysGone(t, db.Prefix, list)
	other := identityLocker(t, cli, db.Prefix)
	if g, err := other.TryAcquire(ctx, "cancelled", ttl); err != nil {
		t.Errorf("TryAcquire after the cancelled calls: %v", err)
	} else if err := g.Release(ctx); err != nil {
		t.Error(err)
	}
	if err := l.Close(); err != nil {
		t.Error(err)
	}
	if keys := list(); len(keys) != 0 {
		t.Errorf("keys left after Close: %v", keys)
	}
}

// Waiters queued behind a holder, some of them cancelled while they wait
// (one just as the holder releases): the others are served in the order
// they queued, each woken as soon as the one before it releases (within
// 2s on a loaded machine), never held up until a cancelled waiter's TTL.
func TestCancelledWaitersDoNotHoldUpThoseBehind(t *testing.T) {
	t.Parallel()
	db := etcdserver.Shared(t)
	cli := identityClient(t, db)
	l := identityLocker(t, cli, db.Prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const ttl = 10 * time.Second

	for round := 0; round < 5; round++ {
		holder, err := l.Acquire(ctx, "queue", ttl)
		if err != nil {
			t.Fatal(err)
		}
		const n = 6
		type result struct {
			i   int
			g   locks.Lease
			err error
			at  time.Time
		}
		results := make(chan result, n)
		cancels := make([]context.CancelFunc, n)
		for i := 0; i < n; i++ {
			wctx, wcancel := context.WithCancel(ctx)
			cancels[i] = wcancel
			go func() {
				g, err := l.Acquire(wctx, "queue", ttl)
				results <- result{i, g, err, time.Now()}
			}()
			// Queue them one after the other, so their order is known.
			for len(keysUnder(t, ctx, cli, db.Prefix)) < i+2 {
				time.Sleep(5 * time.Millisecond)
			}
		}
		// Waiter 0, first in line, is cancelled as the holder releases;
		// 2 and 3 in the middle and 5, the last, before.
		for _, i := range []int{2, 3, 5} {
			cancels[i]()
		}
		go func() {
			time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
			cancels[0]()
		}()
		released := time.Now()
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		var served []int
		last := holder.Token()
		for got := 0; got < n; got++ {
			var r result
			select {
			case r = <-results:
			case <-time.After(5 * time.Second):
				t.Fatalf("round %d: a waiter still waits 5s after its turn (served so far %v)", round, served)
			}
			if r.err != nil {
				if !errors.Is(r.err, context.Canceled) {
					t.Errorf("round %d: waiter %d: %v", round, r.i, r.err)
				}
				continue
			}
			if d := r.at.Sub(released); d > 2*time.Second { // a cancelled waiter's key would last the TTL
				t.Errorf("round %d: waiter %d served %v after the release before it", round, r.i, d)
			}
			if r.g.Token() <= last {
				t.Errorf("round %d: waiter %d token %d after %d", round, r.i, r.g.Token(), last)
			}
			last = r.g.Token()
			served = append(served, r.i)
			released = time.Now()
			if err := r.g.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range cancels {
			c()
		}
		want := []int{1, 4}
		if len(served) == 3 {
			want = []int{0, 1, 4} // waiter 0 got its turn before its cancellation
		}
		if fmt.Sprint(served) != fmt.Sprint(want) {
			t.Errorf("round %d: served %v, want %v", round, served, want)
		}
	}
	keysGone(t, db.Prefix, func() []string { return keysUnder(t, ctx, cli, db.Prefix) })
}

// Waiters that give up while the lock is kept by the lock-delay of a
// holder that stopped renewing — past its Deadline, before its key goes —
// leave no key behind, and the next acquire is granted once the delay
// ends, not a waiter's TTL later.
func TestWaitersGivingUpInLockDelayLeaveNothing(t *testing.T) {
	t.Parallel()
	db := etcdserver.Shared(t)
	cli := identityClient(t, db)
	const ttl, delay = time.Second, time.Second
	l, err := etcdlock.New(cli, etcdlock.Options{Prefix: db.Prefix, LockDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	holder, err := l.Acquire(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	end := holder.Deadline().Add(delay)
	time.Sleep(time.Until(holder.Deadline()))
	gaveUp := 0
	for time.Until(end) > 300*time.Millisecond {
		wctx, wcancel := context.WithTimeout(ctx, 100*time.Millisecond)
		g, err := l.Acquire(wctx, "k", 10*time.Second)
		wcancel()
		if err == nil {
			_ = g.Release(ctx)
			t.Fatalf("granted %v before the delay ended", time.Until(end))
		}
		gaveUp++
		deadline := time.Now().Add(cleanup.Timeout)
		for queueLen(ctx, t, cli, db.Prefix, "k") > 1 {
			if time.Now().After(deadline) {
				t.Fatal("a waiter that gave up left its key")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if gaveUp == 0 {
		t.Skip("too slow: the delay ended before a waiter could give up in it")
	}
	next, err := l.Acquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if late := time.Since(end); late > 3*time.Second {
		t.Fatalf("granted %v after the delay ended", late)
	}
	if next.Token() <= holder.Token() {
		t.Fatalf("token %d after %d", next.Token(), holder.Token())
	}
}
