package etcdlease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
	"github.com/fenceguard/fenceguard/token"
)

func etcdClientDB(t *testing.T, db *etcdserver.DB) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: db.Endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func dbLocker(t *testing.T, c *clientv3.Client, db *etcdserver.DB, o etcdlock.Options) *etcdlock.Locker {
	t.Helper()
	o.Prefix = db.Prefix + "lock/"
	l, err := etcdlock.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func asEtcd(t *testing.T, l locks.Lease) *etcdlock.Lease {
	t.Helper()
	e, ok := l.(*etcdlock.Lease)
	if !ok {
		t.Fatalf("lease %T", l)
	}
	return e
}

// queueKeys lists the keys queueing for key k.
func queueKeys(t *testing.T, ctx context.Context, c *clientv3.Client, db *etcdserver.DB, k string) []string {
	t.Helper()
	resp, err := c.Get(ctx, db.Prefix+"lock/"+k+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, string(kv.Key))
	}
	return out
}

// TestLateReleaseNeverDeletesRegrant: a Release that comes after the
// grant's lease was revoked server-side (its key gone, as at expiry) and
// the lock was granted again — by another Locker, and by the same Locker on
// the very lease it reused — deletes nothing of the new grant's. The claim
// (Release a plain Delete by a name of the grant's alone) holds.
func TestLateReleaseNeverDeletesRegrant(t *testing.T) {
	db := etcdserver.Shared(t)
	c := etcdClientDB(t, db)
	ctx := itest.Ctx(t, 20*time.Second)
	l1 := dbLocker(t, c, db, etcdlock.Options{})
	l2 := dbLocker(t, c, db, etcdlock.Options{})

	// Another Locker regrants after server-side expiry.
	a, err := l1.Acquire(ctx, "k", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ea := asEtcd(t, a)
	if _, err := c.Revoke(ctx, ea.LeaseID()); err != nil {
		t.Fatal(err)
	}
	b, err := l2.Acquire(ctx, "k", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if b.Token() <= a.Token() {
		t.Fatalf("tokens %d then %d", a.Token(), b.Token())
	}
	for range 2 { // late, then duplicate
		if err := a.Release(ctx); !errors.Is(err, locks.ErrNotHeld) {
			t.Fatalf("late release: %v, want ErrNotHeld", err)
		}
	}
	if err := b.Renew(ctx); err != nil {
		t.Fatalf("new grant lost to a late release: %v", err)
	}
	if r, _ := c.Get(ctx, asEtcd(t, b).OwnKey()); len(r.Kvs) != 1 {
		t.Fatal("new grant's key gone")
	}
	select {
	case <-asEtcd(t, b).Lost():
		t.Fatal("new grant reported lost")
	case <-time.After(100 * time.Millisecond):
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// The same Locker regrants on the same (reused) lease.
	a2, err := l1.Acquire(ctx, "k2", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := a2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b2, err := l1.Acquire(ctx, "k2", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if asEtcd(t, b2).LeaseID() != asEtcd(t, a2).LeaseID() {
		t.Logf("lease not reused (%x, %x)", asEtcd(t, a2).LeaseID(), asEtcd(t, b2).LeaseID())
	}
	if err := a2.Release(ctx); err != nil {
		t.Fatalf("duplicate release: %v", err)
	}
	if err := a2.Renew(ctx); !errors.Is(err, locks.ErrNotHeld) {
		t.Fatalf("renew of a released grant whose lease is reused: %v", err)
	}
	if err := b2.Renew(ctx); err != nil {
		t.Fatalf("reused-lease grant lost to a duplicate release: %v", err)
	}
	if err := b2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRevokedPooledLeasesDoNotFailAcquire: leases that died server-side while
// pooled (revoked by an operator, as `etcdctl lease revoke`, or lost to
// anything the local monotonic clock does not see) look fresh to the pool;
// the joining Txn then fails with "lease not found". Acquire starts over once
// more per pooled lease found lapsed, so with six dead leases pooled for the
// TTL, Acquire of a free lock on a healthy cluster still succeeds, and no key
// is written on a dead lease.
func TestRevokedPooledLeasesDoNotFailAcquire(t *testing.T) {
	db := etcdserver.Shared(t)
	c := etcdClientDB(t, db)
	ctx := itest.Ctx(t, 20*time.Second)
	l := dbLocker(t, c, db, etcdlock.Options{})
	const n = 6
	var held []locks.Lease
	for i := range n {
		ls, err := l.Acquire(ctx, fmt.Sprint("k", i), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ls)
	}
	for _, ls := range held {
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Revoke(ctx, asEtcd(t, ls).LeaseID()); err != nil {
			t.Fatal(err)
		}
	}
	ls, err := l.Acquire(ctx, "free", 5*time.Second)
	if err != nil {
		t.Fatalf("Acquire of a free lock on a healthy cluster failed (%d revoked leases pooled): %v", n, err)
	}
	tl, err := c.TimeToLive(ctx, asEtcd(t, ls).LeaseID())
	if err != nil || tl.TTL <= 0 {
		t.Fatalf("granted on a dead lease: %+v %v", tl, err)
	}
	_ = ls.Release(ctx)
}

// TestPooledLeaseRevokedIsNotHandedOut: one or two pooled leases
// revoked server-side are skipped (the Txn fails, acquire retries on a
// fresh one): the grant's lease lives, its key is there, Lost stays open,
// and the server's remaining TTL covers the local deadline.
func TestPooledLeaseRevokedIsNotHandedOut(t *testing.T) {
	db := etcdserver.Shared(t)
	c := etcdClientDB(t, db)
	ctx := itest.Ctx(t, 20*time.Second)
	l := dbLocker(t, c, db, etcdlock.Options{})
	var last token.Token
	for round := range 5 {
		var ids []locks.Lease
		for i := range 2 {
			ls, err := l.Acquire(ctx, fmt.Sprint("k", i), 4*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, ls)
		}
		for _, ls := range ids {
			_ = ls.Release(ctx)
			if round%2 == 0 {
				_, _ = c.Revoke(ctx, asEtcd(t, ls).LeaseID())
			}
		}
		ls, err := l.Acquire(ctx, "k", 4*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if ls.Token() <= last {
			t.Fatalf("token %d after %d", ls.Token(), last)
		}
		last = ls.Token()
		checkLive(t, ctx, c, asEtcd(t, ls))
		_ = ls.Release(ctx)
	}
}

// checkLive checks that a fresh grant's lease lives on the server at least
// as long as its local deadline says, and its key is there.
func checkLive(t *testing.T, ctx context.Context, c *clientv3.Client, e *etcdlock.Lease) {
	t.Helper()
	tl, err := c.TimeToLive(ctx, e.LeaseID())
	if err != nil {
		t.Fatal(err)
	}
	// The server's TTL (whole seconds, rounded down) was read some time
	// during the call: only a local deadline beyond it as seen at the
	// call's end shows the local deadline past the server's.
	local := time.Until(e.Deadline())
	if tl.TTL <= 0 || time.Duration(tl.TTL+1)*time.Second < local {
		t.Fatalf("lease %x: server TTL %ds, local deadline in %v", e.LeaseID(), tl.TTL, local)
	}
	if local <= 0 {
		t.Fatalf("granted with its deadline past (%v)", local)
	}
	r, err := c.Get(ctx, e.OwnKey())
	if err != nil || len(r.Kvs) != 1 || r.Kvs[0].CreateRevision != int64(e.Token()) {
		t.Fatalf("key %q: %v %v", e.OwnKey(), r, err)
	}
	select {
	case <-e.Lost():
		t.Fatal("fresh grant lost at once")
	default:
	}
}

// TestReuseRacesBackgroundRefresh: acquires and releases on one
// Locker, at random gaps spread over the idle refresh's timer (a quarter
// of the TTL) and the 2/3 put-back threshold, so that reuse races the
// background refreshes: every grant's lease covers its local deadline on
// the server, its key lives, and tokens strictly increase.
func TestReuseRacesBackgroundRefresh(t *testing.T) {
	db := etcdserver.Shared(t)
	c := etcdClientDB(t, db)
	ctx := itest.Ctx(t, 30*time.Second)
	l := dbLocker(t, c, db, etcdlock.Options{})
	const ttl = 3 * time.Second
	var mu sync.Mutex
	var last token.Token
	var wg sync.WaitGroup
	end := time.Now().Add(9 * time.Second)
	for g := range 3 {
		wg.Go(func() {
			for time.Now().Before(end) {
				ls, err := l.Acquire(ctx, fmt.Sprint("k", g%2), ttl)
				if err != nil {
					t.Error(err)
					return
				}
				checkLive(t, ctx, c, asEtcd(t, ls))
				mu.Lock()
				if g%2 == 0 && ls.Token() <= last {
					t.Errorf("token %d after %d", ls.Token(), last)
				}
				if g%2 == 0 {
					last = ls.Token()
				}
				mu.Unlock()
				time.Sleep(time.Duration(rand.Int64N(int64(1300 * time.Millisecond))))
				if err := ls.Release(ctx); err != nil {
					t.Error(err)
				}
				time.Sleep(time.Duration(rand.Int64N(int64(1100 * time.Millisecond))))
			}
		})
	}
	wg.Wait()
}

// TestCancelledAcquireLeavesNoKey: Acquires and TryAcquires whose
// contexts end at random moments (before the lease, in the Txn, while
// waiting) behind a holder leave no key in the queue once their bounded
// clean-ups ran (well within the lease TTL), and the next acquirer after
// the holder's release is granted at once.
func TestCancelledAcquireLeavesNoKey(t *testing.T) {
	db := etcdserver.Shared(t)
	c := etcdClientDB(t, db)
	ctx := itest.Ctx(t, 30*time.Second)
	l := dbLocker(t, c, db, etcdlock.Options{})
	l2 := dbLocker(t, c, db, etcdlock.Options{})
	const ttl = 10 * time.Second
	h, err := l.Acquire(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	// A clean-up gives up after about a second (the key then goes with its
	// lease, at the TTL): on a machine so busy that etcd's round trips
	// approach that, the probe's slowest one allows for it.
	slowest, stopProbe := probeRoundTrips(ctx, c)
	defer stopProbe()
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range 60 {
		wg.Go(func() {
			d := time.Duration(rand.Int64N(int64(15 * time.Millisecond)))
			cctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			ll := l
			if i%2 == 1 {
				ll = l2
			}
			var err error
			var got locks.Lease
			if i%5 == 0 {
				got, err = ll.TryAcquire(cctx, "k", ttl)
			} else {
				got, err = ll.Acquire(cctx, "k", ttl)
			}
			if err == nil {
				t.Errorf("granted while held: %d", got.Token())
				_ = got.Release(ctx)
			} else {
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second) // clean-ups: ~1s bound, far below the TTL
	waitedTTL := false
	for {
		ks := queueKeys(t, ctx, c, db, "k")
		if len(ks) == 0 {
			break
		}
		if time.Now().After(deadline) {
			if rt := slowest(); rt >= 300*time.Millisecond && !waitedTTL {
				waitedTTL = true
				t.Logf("%d keys still queue 3s after the cancelled acquires, with etcd round trips up to %v: waiting for the TTL (%v)", len(ks), rt, ttl)
				deadline = time.Now().Add(ttl + 2*time.Second)
				continue
			}
			t.Fatalf("%d keys still queue after the cancelled acquires (TTL %v, slowest round trip %v): %v", len(ks), ttl, slowest(), ks)
		}
		time.Sleep(50 * time.Millisecond)
	}
	tctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	n, err := l2.TryAcquire(tctx, "k", ttl)
	if err != nil {
		t.Fatalf("free lock refused after cancelled acquires: %v", err)
	}
	_ = n.Release(ctx)
}

// TestCloseRevokesPooledAndRefreshingLeases: Close while leases sit in
// the pool and while put-backs' refreshes are in flight revokes every one
// of them (TimeToLive -1 on the server), and leaks no goroutine (goleak in
// TestMain).
func TestCloseRevokesPooledAndRefreshingLeases(t *testing.T) {
	db := etcdserver.Shared(t)
	c := etcdClientDB(t, db)
	ctx := itest.Ctx(t, 20*time.Second)
	l, err := etcdlock.New(c, etcdlock.Options{Prefix: db.Prefix + "lock/"})
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 3 * time.Second
	var fresh, old []locks.Lease
	for i := range 4 {
		ls, err := l.Acquire(ctx, fmt.Sprint("old", i), ttl)
		if err != nil {
			t.Fatal(err)
		}
		old = append(old, ls)
	}
	time.Sleep(ttl/3 + 200*time.Millisecond) // below 2/3 TTL left: put back through a refresh
	for i := range 4 {
		ls, err := l.Acquire(ctx, fmt.Sprint("fresh", i), ttl)
		if err != nil {
			t.Fatal(err)
		}
		fresh = append(fresh, ls)
	}
	for _, ls := range append(fresh, old...) {
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ls := range append(fresh, old...) {
		tl, err := c.TimeToLive(ctx, asEtcd(t, ls).LeaseID())
		if err != nil {
			t.Fatal(err)
		}
		if tl.TTL != -1 {
			t.Errorf("lease %x alive after Close: TTL %d", asEtcd(t, ls).LeaseID(), tl.TTL)
		}
	}
	if _, err := l.Acquire(ctx, "x", ttl); !errors.Is(err, locks.ErrClosed) {
		t.Fatalf("acquire after Close: %v", err)
	}
}

// TestContentionTokensIncreaseFIFO: five acquirers over two Lockers
// with pooled, reused leases: never two holders at once, tokens strictly
// increase in grant order, and waiters are served in the order they joined
// (a waiter that joined first — seen in the queue before the other — is
// granted first).
func TestContentionTokensIncreaseFIFO(t *testing.T) {
	db := etcdserver.Shared(t)
	c := etcdClientDB(t, db)
	ctx := itest.Ctx(t, 30*time.Second)
	ls := []*etcdlock.Locker{dbLocker(t, c, db, etcdlock.Options{}), dbLocker(t, c, db, etcdlock.Options{})}
	var mu sync.Mutex
	var inside atomic.Int32
	var order []token.Token
	var wg sync.WaitGroup
	for g := range 5 {
		wg.Go(func() {
			for range 12 {
				lease, err := ls[g%2].Acquire(ctx, "k", 3*time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					t.Error("two holders at once")
				}
				mu.Lock()
				order = append(order, lease.Token())
				mu.Unlock()
				time.Sleep(time.Duration(rand.Int64N(int64(3 * time.Millisecond))))
				inside.Add(-1)
				if err := lease.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for i := 1; i < len(order); i++ {
		if order[i] <= order[i-1] {
			t.Fatalf("grant %d: token %d after %d", i, order[i], order[i-1])
		}
	}
	// FIFO: waiters granted in the order of their tokens (their join
	// revisions) is exactly what strictly increasing grant order says.
	t.Logf("%d grants, tokens %d..%d", len(order), order[0], order[len(order)-1])
}

// TestRevokedWhileHeldLostFires: a grant on a reused lease whose
// lease is revoked server-side while held is reported lost (Lost closes,
// Renew fails with ErrNotHeld), the next grant's token is higher, and a
// fence that admitted the newer token refuses the older one.
func TestRevokedWhileHeldLostFires(t *testing.T) {
	db := etcdserver.Shared(t)
	c := etcdClientDB(t, db)
	ctx := itest.Ctx(t, 20*time.Second)
	l := dbLocker(t, c, db, etcdlock.Options{})
	l2 := dbLocker(t, c, db, etcdlock.Options{})
	warm, err := l.Acquire(ctx, "k", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = warm.Release(ctx)
	a, err := l.Acquire(ctx, "k", 3*time.Second) // on the reused lease
	if err != nil {
		t.Fatal(err)
	}
	ea := asEtcd(t, a)
	lost := ea.Lost()
	if _, err := c.Revoke(ctx, ea.LeaseID()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost:
	case <-time.After(2 * time.Second):
		t.Fatal("Lost did not fire after the lease was revoked")
	}
	if err := a.Renew(ctx); !errors.Is(err, locks.ErrNotHeld) {
		t.Fatalf("renew after loss: %v", err)
	}
	b, err := l2.Acquire(ctx, "k", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if b.Token() <= a.Token() {
		t.Fatalf("token %d after %d", b.Token(), a.Token())
	}
	f := &token.MemoryFence{Check: token.NoCheck()}
	if err := f.Claim(ctx, "r", b.Token()); err != nil {
		t.Fatal(err)
	}
	if err := f.Claim(ctx, "r", a.Token()); !errors.Is(err, token.ErrStale) {
		t.Fatalf("fence admitted the older token after the newer: %v", err)
	}
	_ = b.Release(ctx)
	// The lost grant's lease is not pooled again: the next acquire on l
	// is live.
	n, err := l.Acquire(ctx, "k", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	checkLive(t, ctx, c, asEtcd(t, n))
	_ = n.Release(ctx)
}

// TestServerPausedWhilePooled: the etcd server frozen (SIGSTOP) with
// leases pooled, for 0.5, 1.5 and 2.6 s of a 3 s TTL — around the 2/3
// and 1/4 thresholds — while holders and idle refreshes are due; after it
// resumes every grant's lease is live on the server for at least its local
// deadline, its key is there and Lost stays open, and tokens increase.
func TestServerPausedWhilePooled(t *testing.T) {
	srv := etcdserver.New(t)
	db := &etcdserver.DB{Endpoints: []string{srv.Addr()}, Prefix: "/p/"}
	c := etcdClientDB(t, db)
	ctx := itest.Ctx(t, 40*time.Second)
	l := dbLocker(t, c, db, etcdlock.Options{})
	const ttl = 3 * time.Second
	var last token.Token
	for _, pause := range []time.Duration{500 * time.Millisecond, 1500 * time.Millisecond, 2600 * time.Millisecond} {
		var ls []locks.Lease
		for i := range 3 {
			x, err := l.Acquire(ctx, fmt.Sprint("k", i), ttl)
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, x)
		}
		for _, x := range ls {
			_ = x.Release(ctx)
		}
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(pause)
		if err := srv.Resume(); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			x, err := l.Acquire(ctx, "k0", ttl)
			if err != nil {
				t.Fatalf("pause %v: %v", pause, err)
			}
			if x.Token() <= last {
				t.Fatalf("token %d after %d", x.Token(), last)
			}
			last = x.Token()
			checkLive(t, ctx, c, asEtcd(t, x))
			_ = x.Release(ctx)
		}
	}
}

// probeRoundTrips reads one key every 20ms until stop and reports the
// slowest read so far: how slow etcd answers on this machine right now.
func probeRoundTrips(ctx context.Context, c *clientv3.Client) (slowest func() time.Duration, stop func()) {
	var slow atomic.Int64
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for pctx.Err() == nil {
			t0 := time.Now()
			_, _ = c.Get(pctx, "probe")
			if d := int64(time.Since(t0)); d > slow.Load() {
				slow.Store(d)
			}
			select {
			case <-pctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() time.Duration { return time.Duration(slow.Load()) }, func() { cancel(); <-done }
}
