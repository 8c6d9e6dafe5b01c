package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
	"github.com/fenceguard/fenceguard/locks/lockstest"
	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/fencetest"
)

func TestMain(m *testing.M) {
	harness.DefaultParallel(parallel)
	etcdserver.ExamplesNeed()
	examplesFromEnv()
	harness.Main(m)
}

// parallel is how many tests run at once unless -test.parallel says
// otherwise. Most tests wait on lease TTLs and timers, each on keys of its
// own or a cluster of its own, rather than use the CPU: go test's default
// of GOMAXPROCS would leave a 2-core machine mostly idle. Tests that see
// the whole server (its revision, the process's goroutines) run alone,
// before the parallel ones.
const parallel = 4

func newClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newLocker(t testing.TB, c etcdlock.Client, prefix string) *etcdlock.Locker {
	t.Helper()
	l, err := etcdlock.New(c, etcdlock.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func conformance(t *testing.T, db func(testing.TB) *etcdserver.DB) {
	lockstest.Run(t, lockstest.Config{
		NewLocker: func(t *testing.T) locks.Locker {
			d := db(t)
			return newLocker(t, newClient(t, d.Endpoints), d.Prefix)
		},
		// etcd leases count whole seconds, and 2s is the server's minimum.
		ShortTTL: 2 * time.Second,
		Rounds:   10,
		Unreachable: func(t *testing.T) (locks.Locker, func()) {
			d := db(t)
			p := harness.NewProxy(t, d.Endpoints[0])
			return newLocker(t, newClient(t, []string{p.Addr()}), d.Prefix), func() { _ = p.Cut() }
		},
		Blackholed: func(t *testing.T) (locks.Locker, func()) {
			d := db(t)
			p := harness.NewProxy(t, d.Endpoints[0])
			return newLocker(t, newClient(t, []string{p.Addr()}), d.Prefix), func() { _ = p.Blackhole() }
		},
		LockDelay: func(t *testing.T) (locks.Locker, time.Duration) {
			const delay = 1500 * time.Millisecond // the etcd lease: ceil(2s + 1.5s) = 4s
			d := db(t)
			l, err := etcdlock.New(newClient(t, d.Endpoints), etcdlock.Options{Prefix: d.Prefix, LockDelay: delay})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			return l, delay
		},
	})
}

func TestLockDelayOutOfRangeIsRefused(t *testing.T) {
	t.Parallel()
	c := &clientv3.Client{}
	for _, d := range []time.Duration{-time.Millisecond, locks.MaxLockDelay + time.Millisecond} {
		if _, err := etcdlock.New(c, etcdlock.Options{LockDelay: d}); !errors.Is(err, locks.ErrInvalidArgument) {
			t.Errorf("LockDelay %v: %v, want ErrInvalidArgument", d, err)
		}
	}
}

func TestConformanceEtcd34(t *testing.T) {
	t.Parallel()
	conformance(t, etcdserver.Shared)
}

// A late or retried release of an old grant must not delete a newer grant
// made with the same lease under the same name (the known bug of etcd's own
// Mutex, whose Unlock deletes by a name derived from a session's lease
// while the session may hold the lock again): the lease goes back to the
// pool only once its grant's key is known deleted, and a release that
// failed leaves it out of use.
func TestLateReleaseSparesNewerGrantOnSameLease(t *testing.T) {
	t.Parallel()
	d := etcdserver.Shared(t)
	c := newClient(t, d.Endpoints)
	l := newLocker(t, c, d.Prefix)
	ctx := ctxFor(t, time.Minute)
	first, err := l.Acquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := l.Acquire(ctx, "k", 10*time.Second) // reuses first's lease
	if err != nil {
		t.Fatal(err)
	}
	if second.(*etcdlock.Lease).LeaseID() != first.(*etcdlock.Lease).LeaseID() {
		t.Fatal("the second grant did not reuse the lease: the test would prove nothing")
	}
	if second.(*etcdlock.Lease).OwnKey() != first.(*etcdlock.Lease).OwnKey() {
		t.Fatal("two grants on one lease have two names: a hot key's queue grows with its grants")
	}
	// The first grant's ownership test fails for it, even though its
	// lease and its name live on: deleting everything under the locker's
	// prefix if it held would take the second grant with it.
	resp, err := c.Txn(ctx).If(first.(*etcdlock.Lease).IsOwner()).Then(clientv3.OpDelete(d.Prefix, clientv3.WithPrefix())).Commit()
	if err != nil || resp.Succeeded {
		t.Fatalf("the first grant's ownership test still holds: %v %v", resp, err)
	}
	if err := first.Release(ctx); err != nil { // a retried release sends nothing
		t.Fatal(err)
	}
	if err := second.Renew(ctx); err != nil {
		t.Fatalf("second grant lost: %v", err)
	}
	if second.Token() <= first.Token() {
		t.Fatalf("token %d after %d", second.Token(), first.Token())
	}
	// A release that fails (here before it is sent) may still be applied
	// later: its lease serves no later grant, so nothing can share the
	// name a late delete would remove.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := second.Release(cctx); err == nil {
		t.Fatal("Release on a cancelled context succeeded")
	}
	third, err := l.Acquire(ctx, "k", 10*time.Second)
	if err == nil {
		defer third.Release(ctx)
		if third.(*etcdlock.Lease).LeaseID() == second.(*etcdlock.Lease).LeaseID() {
			t.Fatal("a lease whose release failed serves a later grant")
		}
	}
	_ = second.Release(ctx)
}

// One locker acquiring and releasing one key many times writes its grants
// under as many names as it used leases: the key's queue does not grow with
// its history.
func TestHotKeyReusesNames(t *testing.T) {
	t.Parallel()
	d := etcdserver.Shared(t)
	l := newLocker(t, newClient(t, d.Endpoints), d.Prefix)
	ctx := ctxFor(t, time.Minute)
	names, leases := map[string]bool{}, map[int64]bool{}
	for range 50 {
		g, err := l.Acquire(ctx, "hot", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		names[g.(*etcdlock.Lease).OwnKey()] = true
		leases[int64(g.(*etcdlock.Lease).LeaseID())] = true
		if err := g.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(names) != len(leases) || len(names) > 2 {
		t.Errorf("50 grants used %d names on %d leases; want one name per lease, and the lease reused", len(names), len(leases))
	}
}

// The holder's connection is cut past its TTL: the guard cancels its lease
// context, the next holder gets a larger token, and the cut holder's release
// does not touch the new grant.
func TestHolderCutOffPastTTL(t *testing.T) {
	t.Parallel()
	d := etcdserver.Shared(t)
	proxy := harness.NewProxy(t, d.Endpoints[0])
	cutOff := newLocker(t, newClient(t, []string{proxy.Addr()}), d.Prefix)
	other := newLocker(t, newClient(t, d.Endpoints), d.Prefix)
	const ttl = 2 * time.Second
	// Drift 5%: the loss must show well inside the TTL the test waits.
	g, err := guard.New(cutOff, guard.Options{TTL: ttl, Drift: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, time.Minute)
	lease, err := g.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := proxy.Cut(); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	select {
	case <-lease.Context().Done():
		t.Logf("lease lost %v after the cut: %v", time.Since(cut), context.Cause(lease.Context()))
	case <-time.After(ttl):
		t.Fatalf("lease context still live %v after the cut", ttl)
	}
	next, err := other.Acquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() <= lease.Token() {
		t.Fatalf("next token %d not above the cut holder's %d", next.Token(), lease.Token())
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := lease.Release(rctx); !errors.Is(err, guard.ErrLost) {
		t.Errorf("cut holder's release: %v, want its ErrLost", err)
	}
	if err := next.Renew(ctx); err != nil {
		t.Fatalf("new grant lost after the old holder's release: %v", err)
	}
	_ = next.Release(ctx)
}

// A 3-member cluster loses its leader while a lease is held. Tokens stay
// monotonic; the holder either keeps the lock (its renewals go on) or learns
// it lost it; never two live holders with one token.
func TestLeaderKilledWhileHeld(t *testing.T) {
	t.Parallel()
	cl := etcdserver.NewCluster(t, 3)
	c := newClient(t, cl.Endpoints())
	l := newLocker(t, c, "/t/")
	const ttl = 3 * time.Second
	g, err := guard.New(l, guard.Options{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, 2*time.Minute)
	var tokens []token.Token
	grant := func() *guard.Lease {
		t.Helper()
		lease, err := g.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if n := len(tokens); n > 0 && lease.Token() <= tokens[n-1] {
			t.Fatalf("token %d after %d", lease.Token(), tokens[n-1])
		}
		tokens = append(tokens, lease.Token())
		return lease
	}
	for range 3 {
		_ = grant().Release(ctx)
	}
	held := grant()
	leader, err := cl.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	// Another client tries to take the lock while the cluster elects.
	other := newLocker(t, newClient(t, cl.Endpoints()), "/t/")
	deadline := time.Now().Add(3 * ttl)
	for time.Now().Before(deadline) {
		tctx, cancel := context.WithTimeout(ctx, time.Second)
		got, err := other.TryAcquire(tctx, "k", ttl)
		cancel()
		if err == nil {
			// Only possible once the holder's lease is gone — and then the
			// holder must know it.
			select {
			case <-held.Context().Done():
			default:
				t.Fatalf("second holder (token %d) while the first (token %d) believes it holds", got.Token(), held.Token())
			}
			if got.Token() <= held.Token() {
				t.Fatalf("token %d after %d", got.Token(), held.Token())
			}
			_ = got.Release(ctx)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if held.Context().Err() == nil {
		if err := held.Release(ctx); err != nil {
			t.Fatalf("holder kept the lock through the election, but its release failed: %v", err)
		}
		t.Log("holder kept the lock through the election")
	} else {
		t.Logf("holder learned it lost the lock: %v", context.Cause(held.Context()))
		_ = held.Release(ctx)
	}
	last := grant()
	_ = last.Release(ctx)
	if err := leader.Start(false); err != nil {
		t.Fatal(err)
	}
}

// Waiters are served in the order they queued (create revision), across
// clients.
func TestWaitersServedInArrivalOrder(t *testing.T) {
	t.Parallel()
	d := etcdserver.Shared(t)
	c := newClient(t, d.Endpoints)
	ctx := ctxFor(t, time.Minute)
	first, err := newLocker(t, c, d.Prefix).Acquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	queued := func() int64 {
		resp, err := c.Get(ctx, d.Prefix+"k/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	const n = 5
	order := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		l := newLocker(t, newClient(t, d.Endpoints), d.Prefix)
		wg.Go(func() {
			lease, err := l.Acquire(ctx, "k", 10*time.Second)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			order <- i
			if err := lease.Release(ctx); err != nil {
				t.Errorf("waiter %d release: %v", i, err)
			}
		})
		for deadline := time.Now().Add(10 * time.Second); queued() != int64(i+2); {
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d never queued", i)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(order)
	want := 0
	for got := range order {
		if got != want {
			t.Fatalf("waiter %d was served when waiter %d's turn came", got, want)
		}
		want++
	}
}

// The guard learns of a deleted key from the watch, at once, not at its
// next renewal.
func TestLossReportedAtOnce(t *testing.T) {
	t.Parallel()
	d := etcdserver.Shared(t)
	c := newClient(t, d.Endpoints)
	g, err := guard.New(newLocker(t, c, d.Prefix), guard.Options{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, time.Minute)
	lease, err := g.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Delete(ctx, d.Prefix+"k/", clientv3.WithPrefix()); err != nil { // an operator's hand
		t.Fatal(err)
	}
	select {
	case <-lease.Context().Done():
	case <-time.After(2 * time.Second):
		t.Fatal("deleting the key did not end the lease promptly (renewals are 10s apart)")
	}
	if err := lease.Release(ctx); !errors.Is(err, guard.ErrLost) {
		t.Fatalf("Release = %v, want the loss", err)
	}
}

func TestIssuedBoundsTokens(t *testing.T) {
	t.Parallel()
	d := etcdserver.Shared(t)
	l := newLocker(t, newClient(t, d.Endpoints), d.Prefix)
	ctx := ctxFor(t, time.Minute)
	lease, err := l.Acquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	got, err := l.Issued(ctx, "k")
	if err != nil || got < lease.Token() {
		t.Fatalf("Issued = %d, %v after granting %d", got, err, lease.Token())
	}
}

func TestFenceConformance(t *testing.T) {
	t.Parallel()
	fencetest.Run(t, func(t *testing.T, check token.Check) fencetest.Subject {
		d := etcdserver.Shared(t)
		f := etcdlock.NewFence(newClient(t, d.Endpoints), etcdlock.FenceOptions{
			Prefix: d.Prefix + "fence/", Check: check, Logger: slog.New(slog.DiscardHandler),
		})
		return fencetest.Subject{Fence: f, HighWater: f.HighWater}
	})
}

// Reset writes one audit record per reset, with the store, the resource
// and both marks; a mark key holding something other than a mark is
// repaired all the same, and the error says what it held.
func TestFenceResetAudited(t *testing.T) {
	t.Parallel()
	d := etcdserver.Shared(t)
	c := newClient(t, d.Endpoints)
	var mu sync.Mutex
	var records []string
	logger := slog.New(recordHandler(func(r slog.Record) {
		attrs := ""
		r.Attrs(func(a slog.Attr) bool { attrs += " " + a.String(); return true })
		mu.Lock()
		records = append(records, r.Level.String()+attrs)
		mu.Unlock()
	}))
	f := etcdlock.NewFence(c, etcdlock.FenceOptions{Prefix: d.Prefix + "fence/", Check: token.NoCheck(), Logger: logger})
	ctx := ctxFor(t, time.Minute)
	if err := f.Claim(ctx, "r", 40); err != nil {
		t.Fatal(err)
	}
	if prev, err := f.Reset(ctx, "r", 7); prev != 40 || err != nil {
		t.Fatalf("Reset = %d, %v", prev, err)
	}
	if _, err := c.Put(ctx, d.Prefix+"fence/junk", "not a mark"); err != nil {
		t.Fatal(err)
	}
	if prev, err := f.Reset(ctx, "junk", 9); prev != 0 || err == nil || !strings.Contains(err.Error(), "not a mark") {
		t.Fatalf("Reset of a key holding junk = %d, %v; want 0 and an error naming it", prev, err)
	}
	if hw, err := f.HighWater(ctx, "junk"); hw != 9 || err != nil {
		t.Fatalf("after the reset, junk's mark = %d, %v; want 9", hw, err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{
		"WARN store=etcd resource=r from=40 to=7",
		"WARN store=etcd resource=junk from=0 to=9",
	}
	if fmt.Sprint(records) != fmt.Sprint(want) {
		t.Fatalf("audit records %q, want %q", records, want)
	}
}

type recordHandler func(slog.Record)

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	h(r)
	return nil
}
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordHandler) WithGroup(string) slog.Handler      { return h }

// keepAliveCounter counts the one-shot keep-alives the locker sends.
type keepAliveCounter struct {
	*clientv3.Client
	n atomic.Int64
}

func (k *keepAliveCounter) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	k.n.Add(1)
	return k.Client.KeepAliveOnce(ctx, id)
}

// A lease released with less than two thirds of its TTL left is refreshed
// in the background, so the acquire that reuses it sends no keep-alive of
// its own and still gets a deadline a whole TTL away; Close revokes it.
func TestReleasedLeaseRefreshedForReuse(t *testing.T) {
	t.Parallel()
	d := etcdserver.Shared(t)
	c := newClient(t, d.Endpoints)
	kc := &keepAliveCounter{Client: c}
	l := newLocker(t, kc, d.Prefix)
	ctx := ctxFor(t, time.Minute)
	const ttl = 3 * time.Second
	first, err := l.Acquire(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl/3 + 200*time.Millisecond) // under two thirds left
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 2*time.Second, func() error {
		if kc.n.Load() == 0 {
			return errors.New("the released lease was not refreshed")
		}
		return nil
	})
	time.Sleep(50 * time.Millisecond) // let the refresh put it back
	second, err := l.Acquire(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	id := second.(*etcdlock.Lease).LeaseID()
	if id != first.(*etcdlock.Lease).LeaseID() {
		t.Fatal("the second grant did not reuse the refreshed lease")
	}
	if n := kc.n.Load(); n != 1 {
		t.Fatalf("%d keep-alives, want 1 (the background refresh alone)", n)
	}
	if left := time.Until(second.Deadline()); left < 2*ttl/3 {
		t.Fatalf("deadline %v away, want at least %v", left, 2*ttl/3)
	}
	if err := second.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ttlResp, err := c.TimeToLive(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if ttlResp.TTL != -1 {
		t.Fatalf("lease still alive after Close (TTL %d)", ttlResp.TTL)
	}
}

// An idle lease is refreshed in the background, where it is in the pool,
// while it has been idle for less than a TTL, so an acquire after a short
// pause finds it fresh and sends no keep-alive; after that it is left to
// lapse.
func TestIdleLeaseKeptFreshForATTL(t *testing.T) {
	t.Parallel()
	d := etcdserver.Shared(t)
	c := newClient(t, d.Endpoints)
	kc := &keepAliveCounter{Client: c}
	l := newLocker(t, kc, d.Prefix)
	ctx := ctxFor(t, time.Minute)
	const ttl = 3 * time.Second
	first, err := l.Acquire(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Release(ctx); err != nil { // fresh: pooled as it is
		t.Fatal(err)
	}
	// Idle past two thirds left, and before the second background refresh
	// (every quarter of a TTL).
	time.Sleep(ttl/3 + 100*time.Millisecond)
	n := kc.n.Load()
	if n != 1 {
		t.Fatalf("%d keep-alives while idle, want 1", n)
	}
	second, err := l.Acquire(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if second.(*etcdlock.Lease).LeaseID() != first.(*etcdlock.Lease).LeaseID() {
		t.Fatal("the second grant did not reuse the idle lease")
	}
	if m := kc.n.Load(); m != n {
		t.Fatalf("%d keep-alives, want %d: the acquire sent one of its own", m, n)
	}
	if left := time.Until(second.Deadline()); left < 2*ttl/3 {
		t.Fatalf("deadline %v away, want at least %v", left, 2*ttl/3)
	}
	if err := second.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Idle from here: refreshed for about a TTL (every quarter of one),
	// then no more.
	n0 := kc.n.Load()
	time.Sleep(3 * ttl)
	n1 := kc.n.Load()
	time.Sleep(ttl)
	if n2 := kc.n.Load(); n1-n0 > 5 || n2 != n1 {
		t.Fatalf("keep-alives while idle: %d in the first 3 TTLs, %d in the next, want at most 5 and then none", n1-n0, n2-n1)
	}
}

// lostReply applies the first transaction that writes a lock key and then
// reports it failed, as when the caller's context ends while the reply is
// on its way.
type lostReply struct {
	*clientv3.Client
	once sync.Once
}

func (c *lostReply) Txn(ctx context.Context) clientv3.Txn {
	return &lostReplyTxn{Txn: c.Client.Txn(ctx), c: c}
}

type lostReplyTxn struct {
	clientv3.Txn
	c *lostReply
}

func (t *lostReplyTxn) If(cs ...clientv3.Cmp) clientv3.Txn   { t.Txn = t.Txn.If(cs...); return t }
func (t *lostReplyTxn) Then(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Then(ops...); return t }
func (t *lostReplyTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }

func (t *lostReplyTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	lost := false
	if err == nil {
		t.c.once.Do(func() { lost = true })
	}
	if lost {
		return nil, context.DeadlineExceeded
	}
	return resp, err
}

// An acquire whose joining transaction was applied but whose reply was lost
// must not leave its key queueing behind a lease the locker goes on using:
// the next acquire of the key, on the same locker, gets the lock at once.
func TestLostJoinReplyLeavesNoBlockingKey(t *testing.T) {
	t.Parallel()
	d := etcdserver.Shared(t)
	c := newClient(t, d.Endpoints)
	l := newLocker(t, &lostReply{Client: c}, d.Prefix)
	ctx := ctxFor(t, time.Minute)
	if _, err := l.Acquire(ctx, "warm", 10*time.Second); err == nil { // the lost reply
		t.Fatal("the first acquire succeeded: the fault did not bite")
	}
	lease, err := l.Acquire(ctx, "other", 10*time.Second) // a lease for the pool
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	got, err := l.Acquire(actx, "warm", 10*time.Second)
	if err != nil {
		t.Fatalf("the key of the failed acquire still blocks the lock: %v", err)
	}
	_ = got.Release(ctx)
}

// A grant on a lease reused from the idle pool keeps the lock-delay too:
// its etcd lease, kept alive from before the acquire, outlives the grant's
// Deadline (counted from that keep-alive) by the delay.
func TestLockDelayHoldsOnAPooledLease(t *testing.T) {
	t.Parallel()
	const ttl, delay = 2 * time.Second, 1500 * time.Millisecond
	d := etcdserver.Shared(t)
	ctx := ctxFor(t, time.Minute)
	l, err := etcdlock.New(newClient(t, d.Endpoints), etcdlock.Options{Prefix: d.Prefix, LockDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	var a locks.Lease
	var key string
	for attempt := 1; ; attempt++ {
		key = fmt.Sprintf("k%d", attempt)
		first, err := l.Acquire(ctx, key, ttl)
		if err != nil {
			t.Fatal(err)
		}
		id := first.(*etcdlock.Lease).LeaseID()
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// The pooled lease ages, as between two uses, though less than
		// the TTL/4 after its keep-alive at which the pool refreshes it:
		// no acquire takes a lease while its refresh is on its way.
		time.Sleep(ttl / 8)
		if a, err = l.Acquire(ctx, key, ttl); err != nil {
			t.Fatal(err)
		}
		got := a.(*etcdlock.Lease).LeaseID()
		if got == id {
			break
		}
		// A stall of the test past the refresh: try again.
		if attempt == 3 {
			t.Fatalf("second grant on lease %x, want the pooled %x (3 attempts)", got, id)
		}
		t.Logf("attempt %d: second grant on lease %x, not the pooled %x", attempt, got, id)
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	bound := a.Deadline().Add(delay)
	next, err := l.Acquire(ctx, key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if at := time.Now(); at.Before(bound) {
		t.Errorf("granted %v before the pooled grant's Deadline plus the delay", bound.Sub(at))
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Waiters queued behind a lease that expires unreleased are served in the
// order they queued once the lock-delay is over, none of them before it.
func TestLockDelayKeepsFIFOAfterExpiry(t *testing.T) {
	t.Parallel()
	const ttl, delay = 2 * time.Second, 1500 * time.Millisecond
	d := etcdserver.Shared(t)
	c := newClient(t, d.Endpoints)
	ctx := ctxFor(t, time.Minute)
	newDelayLocker := func() *etcdlock.Locker {
		l, err := etcdlock.New(newClient(t, d.Endpoints), etcdlock.Options{Prefix: d.Prefix, LockDelay: delay})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	first, err := newDelayLocker().Acquire(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	queued := func() int64 {
		resp, err := c.Get(ctx, d.Prefix+"k/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	const n = 3
	type served struct {
		i  int
		at time.Time
	}
	order := make(chan served, n)
	var wg sync.WaitGroup
	for i := range n {
		l := newDelayLocker()
		wg.Go(func() {
			lease, err := l.Acquire(ctx, "k", 10*time.Second)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			order <- served{i, time.Now()}
			if err := lease.Release(ctx); err != nil {
				t.Errorf("waiter %d release: %v", i, err)
			}
		})
		for deadline := time.Now().Add(10 * time.Second); queued() != int64(i+2); {
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d never queued", i)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	bound := first.Deadline().Add(delay)
	wg.Wait()
	close(order)
	want := 0
	for s := range order {
		if s.i != want {
			t.Fatalf("waiter %d was served when waiter %d's turn came", s.i, want)
		}
		if s.at.Before(bound) {
			t.Errorf("waiter %d served %v before the expired lease's Deadline plus the delay", s.i, bound.Sub(s.at))
		}
		want++
	}
}
