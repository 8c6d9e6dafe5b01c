package lockstest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/locks"
)

// LockDelaySlack is how late after a lock-delay ends a waiter may be
// granted the lock: lock services count expiries coarsely (etcd rounds a
// lease's TTL up to whole seconds and checks for expired leases twice a
// second).
const LockDelaySlack = 2 * time.Second

// lockDelay checks [Config.LockDelay]: an expiry withholds the lock for the
// delay from waiters already queued and from later acquirers alike, which
// then wake without polling; a waiter giving up within the delay frees
// nothing; keys granted together in one call keep the delay each; a
// release grants it at once; a lease left to run out is refused renewal
// only once the delay is over too.
func (s *suite) lockDelay(t *testing.T) {
	if s.cfg.LockDelay == nil {
		t.Skip("Config.LockDelay is nil")
	}
	t.Run("ExpiryWithholdsTheLock", s.delayExpiry)
	t.Run("ReleaseGrantsAtOnce", s.delayRelease)
	t.Run("HandedOverGrantExpiry", s.delayHandedOver)
	t.Run("UnclaimedExpiry", s.delayUnclaimed)
	t.Run("LateReleaseWithinTheDelay", s.delayLateRelease)
	t.Run("WaiterCancelledWithinTheDelay", s.delayWaiterCancelled)
	t.Run("SetTakenInOneCallExpiry", s.delaySetExpiry)
}

func (s *suite) delayLocker(t *testing.T) (locks.Locker, time.Duration) {
	t.Helper()
	l, delay := s.cfg.LockDelay(t)
	if l == nil {
		t.Fatal("LockDelay returned a nil locker")
	}
	return l, delay
}

type delayGrant struct {
	lease locks.Lease
	at    time.Time
	err   error
}

func acquireAsync(ctx context.Context, l locks.Locker, k string, ttl time.Duration) <-chan delayGrant {
	got := make(chan delayGrant, 1)
	go func() {
		lease, err := l.Acquire(ctx, k, ttl)
		got <- delayGrant{lease, time.Now(), err}
	}()
	return got
}

// A's lease runs out unreleased. Neither the waiter queued behind it nor an
// acquirer arriving after A's deadline may hold the lock before A's
// acquire was sent plus TTL plus the delay: the server's expiry is after
// the send. The TTL and the Deadline stay the TTL's.
func (s *suite) delayExpiry(t *testing.T) {
	l, delay := s.delayLocker(t)
	ctx, k, ttl := ctxFor(t, time.Minute), key(t, "k"), s.cfg.ShortTTL
	sent := time.Now()
	a := mustAcquire(t, ctx, l, k, ttl)
	got := time.Now()
	if a.TTL() != ttl {
		t.Errorf("TTL() = %v, want %v: the delay is not part of the lease", a.TTL(), ttl)
	}
	if d := a.Deadline(); d.Before(sent.Add(ttl-ttl/20)) || d.After(got.Add(ttl)) {
		t.Errorf("Deadline() is %v after the acquire was sent, want about the TTL %v (the delay is not part of the lease)", d.Sub(sent), ttl)
	}
	bound := sent.Add(ttl + delay)

	queued := acquireAsync(ctx, l, k, s.cfg.LongTTL)
	// Past A's lease, within the delay: held, for a newcomer too.
	time.Sleep(time.Until(sent.Add(ttl + delay/2)))
	select {
	case r := <-queued:
		t.Fatalf("the queued waiter got the lock %v after A's acquire, within the delay: %v", r.at.Sub(sent), r.err)
	default:
	}
	if time.Now().Before(bound) {
		assertHeld(t, ctx, l, k)
	}
	later := acquireAsync(ctx, l, k, s.cfg.LongTTL)

	var first delayGrant
	var second <-chan delayGrant
	sched := schedDelay(time.Until(bound))
	select {
	case first = <-queued:
		second = later
	case first = <-later:
		second = queued
	}
	if first.err != nil {
		t.Fatalf("first acquire after the expiry: %v", first.err)
	}
	if first.at.Before(bound) {
		t.Errorf("granted %v after A's acquire was sent, before TTL %v + delay %v", first.at.Sub(sent), ttl, delay)
	}
	if late := first.at.Sub(bound); late > LockDelaySlack {
		if allowed := LockDelaySlack + sched(); late > allowed {
			t.Errorf("granted %v after the delay ended, want under %v", late, allowed)
		}
	}
	if first.lease.Token() <= a.Token() {
		t.Errorf("token %d after the expired %d", first.lease.Token(), a.Token())
	}
	mustRelease(t, ctx, first.lease)
	r := <-second
	if r.err != nil {
		t.Fatalf("second acquire after the expiry: %v", r.err)
	}
	if r.at.Before(bound) {
		t.Errorf("granted %v after A's acquire was sent, before TTL %v + delay %v", r.at.Sub(sent), ttl, delay)
	}
	if r.lease.Token() <= first.lease.Token() {
		t.Errorf("token %d after %d", r.lease.Token(), first.lease.Token())
	}
	if err := a.Renew(ctx); !errors.Is(err, locks.ErrNotHeld) {
		t.Errorf("Renew of the expired lease after another's grant: %v, want ErrNotHeld", err)
	}
	mustRelease(t, ctx, r.lease)
}

// A release is no expiry: the waiter is granted at once.
func (s *suite) delayRelease(t *testing.T) {
	l, delay := s.delayLocker(t)
	ctx, k := ctxFor(t, time.Minute), key(t, "k")
	for _, ttl := range []time.Duration{s.cfg.LongTTL, s.cfg.ShortTTL} {
		holder := mustAcquire(t, ctx, l, k, ttl)
		got := acquireAsync(ctx, l, k, s.cfg.LongTTL)
		time.Sleep(min(100*time.Millisecond, ttl/3)) // let the waiter block; nothing to observe
		released := time.Now()
		sched := schedDelay(time.Millisecond)
		mustRelease(t, ctx, holder)
		r := <-got
		if r.err != nil {
			t.Fatalf("waiter: %v", r.err)
		}
		if d := r.at.Sub(released); d > WakeBound {
			if allowed := WakeBound + sched(); d > allowed {
				t.Errorf("TTL %v, delay %v: waiter held the lock %v after the release, want under %v", ttl, delay, d, allowed)
			}
		}
		mustRelease(t, ctx, r.lease)
		// Nobody waiting: free at once too.
		after, err := l.TryAcquire(ctx, k, ttl)
		if err != nil {
			t.Fatalf("TryAcquire right after a release: %v", err)
		}
		mustRelease(t, ctx, after)
	}
}

// A grant a release handed to a waiter carries the delay too: when it runs
// out unreleased, the other waiter is held off until its Deadline plus the
// delay. (Which waiter is served first is the backend's order: Redlock
// has none.)
func (s *suite) delayHandedOver(t *testing.T) {
	l, delay := s.delayLocker(t)
	ctx, k, ttl := ctxFor(t, time.Minute), key(t, "k"), s.cfg.ShortTTL
	holder := mustAcquire(t, ctx, l, k, s.cfg.LongTTL)
	w1 := acquireAsync(ctx, l, k, ttl)
	time.Sleep(100 * time.Millisecond) // let it queue first; nothing to observe
	w2 := acquireAsync(ctx, l, k, ttl)
	time.Sleep(100 * time.Millisecond)
	mustRelease(t, ctx, holder)
	var first delayGrant
	var other <-chan delayGrant
	select {
	case first = <-w1:
		other = w2
	case first = <-w2:
		other = w1
	}
	if first.err != nil {
		t.Fatalf("first waiter: %v", first.err)
	}
	bound := first.lease.Deadline().Add(delay)
	sched := schedDelay(time.Until(bound))
	r := <-other
	if r.err != nil {
		t.Fatalf("second waiter: %v", r.err)
	}
	if r.at.Before(bound) {
		t.Errorf("second waiter granted %v before the first one's Deadline plus the delay %v", bound.Sub(r.at), delay)
	}
	if late := r.at.Sub(bound); late > LockDelaySlack {
		if allowed := LockDelaySlack + sched(); late > allowed {
			t.Errorf("second waiter granted %v after the delay ended, want under %v", late, allowed)
		}
	}
	if r.lease.Token() <= first.lease.Token() {
		t.Errorf("token %d after %d", r.lease.Token(), first.lease.Token())
	}
	mustRelease(t, ctx, r.lease)
}

// A lease left to run out with nobody waiting: held through the delay,
// then refused renewal and free.
func (s *suite) delayUnclaimed(t *testing.T) {
	l, delay := s.delayLocker(t)
	ctx, k, ttl := ctxFor(t, time.Minute), key(t, "k"), s.cfg.ShortTTL
	sent := time.Now()
	a := mustAcquire(t, ctx, l, k, ttl)
	time.Sleep(time.Until(sent.Add(ttl + delay/2)))
	if time.Now().Before(sent.Add(ttl + delay)) {
		assertHeld(t, ctx, l, k)
	}
	time.Sleep(time.Until(sent.Add(ttl + delay)))
	var next locks.Lease
	give := time.Now().Add(LockDelaySlack + time.Second)
	for {
		lease, err := l.TryAcquire(ctx, k, s.cfg.LongTTL)
		if err == nil {
			next = lease
			break
		}
		if !errors.Is(err, locks.ErrNotObtained) || time.Now().After(give) {
			t.Fatalf("TryAcquire %v after the delay ended: %v", time.Since(sent.Add(ttl+delay)), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := a.Renew(ctx); !errors.Is(err, locks.ErrNotHeld) {
		t.Errorf("Renew after the lease and the delay ran out: %v, want ErrNotHeld", err)
	}
	if next.Token() <= a.Token() {
		t.Errorf("token %d after the expired %d", next.Token(), a.Token())
	}
	mustRelease(t, ctx, next)
}

// A Release that comes after the lease's Deadline but within the delay —
// a holder that let go late — frees the lock at once: the waiter queued
// behind it does not wait for the rest of the delay.
func (s *suite) delayLateRelease(t *testing.T) {
	l, delay := s.delayLocker(t)
	ctx, k, ttl := ctxFor(t, time.Minute), key(t, "k"), s.cfg.ShortTTL
	holder := mustAcquire(t, ctx, l, k, ttl)
	got := acquireAsync(ctx, l, k, s.cfg.LongTTL)
	time.Sleep(time.Until(holder.Deadline()) + delay/4)
	end := holder.Deadline().Add(delay)
	released := time.Now()
	err := holder.Release(ctx)
	r := <-got
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	defer mustRelease(t, ctx, r.lease)
	t.Logf("Release %v after the Deadline: %v; waiter granted %v after it", released.Sub(holder.Deadline()), err, r.at.Sub(released))
	if r.at.Before(released) {
		t.Errorf("waiter granted %v before the release, within the delay", released.Sub(r.at))
	}
	if !r.at.Before(end) {
		t.Errorf("waiter granted only %v after the Deadline + delay: the late Release did not free the lock", r.at.Sub(end))
	}
	if r.lease.Token() <= holder.Token() {
		t.Errorf("waiter's token %d, holder's %d", r.lease.Token(), holder.Token())
	}
}

// A waiter that gives up within the delay is not granted the lock, and
// the waiter queued behind it stays held off until the delay ends: its
// leaving frees nothing.
func (s *suite) delayWaiterCancelled(t *testing.T) {
	l, delay := s.delayLocker(t)
	ctx, k, ttl := ctxFor(t, time.Minute), key(t, "k"), s.cfg.ShortTTL
	sent := time.Now()
	a := mustAcquire(t, ctx, l, k, ttl)
	bound := sent.Add(ttl + delay)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	first := acquireAsync(wctx, l, k, s.cfg.LongTTL)
	time.Sleep(100 * time.Millisecond) // let it queue first; nothing to observe
	second := acquireAsync(ctx, l, k, s.cfg.LongTTL)
	time.Sleep(time.Until(a.Deadline().Add(delay / 2)))
	cancel()
	if r := <-first; r.err == nil {
		if r.at.Before(bound) {
			t.Errorf("the cancelled waiter was granted %v after A's acquire, within the delay", r.at.Sub(sent))
		}
		mustRelease(t, ctx, r.lease)
	}
	sched := schedDelay(time.Until(bound))
	r := <-second
	if r.err != nil {
		t.Fatalf("the waiter behind the cancelled one: %v", r.err)
	}
	defer mustRelease(t, ctx, r.lease)
	if r.at.Before(bound) {
		t.Errorf("the waiter behind the cancelled one was granted %v after A's acquire, before TTL %v + delay %v", r.at.Sub(sent), ttl, delay)
	}
	if late := r.at.Sub(bound); late > LockDelaySlack {
		if allowed := LockDelaySlack + sched(); late > allowed {
			t.Errorf("granted %v after the delay ended, want under %v", late, allowed)
		}
	}
	if r.lease.Token() <= a.Token() {
		t.Errorf("token %d after the expired %d", r.lease.Token(), a.Token())
	}
}

// Keys granted together in one call ([locks.MultiTryAcquirer]) and left to
// run out keep the delay each, as a single grant does: a waiter queued on
// one and a try on the other are held off until the delay ends.
func (s *suite) delaySetExpiry(t *testing.T) {
	l, delay := s.delayLocker(t)
	m, ok := l.(locks.MultiTryAcquirer)
	if !ok {
		t.Skip("the locker takes no set in one call")
	}
	ctx, ttl := ctxFor(t, time.Minute), s.cfg.ShortTTL
	keys := []string{key(t, "a"), key(t, "b")}
	sent := time.Now()
	set, err := m.TryAcquireAll(ctx, keys, ttl)
	if err != nil {
		t.Fatalf("TryAcquireAll: %v", err)
	}
	if len(set) != len(keys) {
		t.Fatalf("TryAcquireAll granted %d leases for %d keys", len(set), len(keys))
	}
	for _, lease := range set {
		if lease.TTL() != ttl {
			t.Errorf("%q: TTL() = %v, want %v: the delay is not part of the lease", lease.Key(), lease.TTL(), ttl)
		}
	}
	bound := sent.Add(ttl + delay)
	queued := acquireAsync(ctx, l, keys[1], s.cfg.LongTTL)
	time.Sleep(time.Until(sent.Add(ttl + delay/2)))
	select {
	case r := <-queued:
		t.Fatalf("the waiter got %q %v after the set's acquire, within the delay: %v", keys[1], r.at.Sub(sent), r.err)
	default:
	}
	if time.Now().Before(bound) {
		assertHeld(t, ctx, l, keys[0])
	}
	sched := schedDelay(time.Until(bound))
	r := <-queued
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	defer mustRelease(t, ctx, r.lease)
	if r.at.Before(bound) {
		t.Errorf("granted %v after the set's acquire, before TTL %v + delay %v", r.at.Sub(sent), ttl, delay)
	}
	if late := r.at.Sub(bound); late > LockDelaySlack {
		if allowed := LockDelaySlack + sched(); late > allowed {
			t.Errorf("granted %v after the delay ended, want under %v", late, allowed)
		}
	}
	if r.lease.Token() <= set[1].Token() {
		t.Errorf("token %d after the expired %d", r.lease.Token(), set[1].Token())
	}
}
