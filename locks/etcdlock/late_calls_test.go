// Late calls of an earlier grant — a release applied after its own retry,
// a renewal that raced the release — against a newer grant of the same
// key on the same Locker, whose key may have the same name (it is named
// after the lease, which the Locker reuses).

package etcdlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
)

// A Release whose delete went to a frozen member fails; the caller retries
// it through another member and it succeeds, so the grant's lease goes back
// to the pool and the next grant of the key, on the same lease, has the
// same key name. When the frozen member wakes, the first delete may still
// be applied: it must not remove the newer grant.
func TestRetriedReleaseAfterFrozenMemberSparesNewerGrant(t *testing.T) {
	t.Parallel()
	c := etcdserver.NewCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var follower, other string
	var frozen = c.Members[0]
	for _, m := range c.Members {
		if m != leader && follower == "" {
			follower, frozen = m.Addr(), m
		}
	}
	other = leader.Addr()
	plain, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()

	const prefix = "/attack/"
	deadline := time.Now().Add(8 * time.Second)
	tries, hits := 0, 0
	for time.Now().Before(deadline) {
		tries++
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{follower}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		l, err := etcdlock.New(cli, etcdlock.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		g1, err := l.Acquire(ctx, "k", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := frozen.Pause(); err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err = g1.Release(rctx)
		rcancel()
		if err == nil {
			t.Fatal("release through a frozen member succeeded")
		}
		cli.SetEndpoints(other)
		var retryErr error
		for i := 0; i < 20; i++ {
			rctx, rcancel := context.WithTimeout(ctx, time.Second)
			retryErr = g1.Release(rctx)
			rcancel()
			if retryErr == nil {
				break
			}
		}
		if retryErr != nil {
			t.Fatalf("retried release: %v", retryErr)
		}
		g2, err := l.Acquire(ctx, "k", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		el1, _ := g1.(*etcdlock.Lease)
		el2, _ := g2.(*etcdlock.Lease)
		same := el1.LeaseID() == el2.LeaseID()
		if err := frozen.Resume(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		resp, err := plain.Get(ctx, el2.OwnKey())
		if err != nil {
			t.Fatal(err)
		}
		held := len(resp.Kvs) == 1 && resp.Kvs[0].CreateRevision == int64(g2.Token())
		if !held {
			hits++
			ttl, _ := plain.TimeToLive(ctx, el2.LeaseID())
			var delRev int64
			wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
			for wr := range plain.Watch(wctx, el2.OwnKey(), clientv3.WithRev(int64(g2.Token())+1), clientv3.WithFilterPut()) {
				if len(wr.Events) > 0 {
					delRev = wr.Events[0].Kv.ModRevision
					break
				}
			}
			wcancel()
			other, err := etcdlock.New(plain, etcdlock.Options{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			if g3, err := other.TryAcquire(ctx, "k", 5*time.Second); err == nil {
				t.Errorf("try %d: another Locker got the lock (token %d) while the newer grant (token %d) is %v before its deadline, and thinks it holds it",
					tries, g3.Token(), g2.Token(), time.Until(g2.Deadline()).Round(time.Millisecond))
				_ = g3.Release(ctx)
			}
			_ = other.Close()
			t.Errorf("try %d: newer grant (token %d, key %s, same lease %v) deleted at revision %d, its lease alive with %ds left, by the frozen member's late delete of the earlier grant (token %d)",
				tries, g2.Token(), el2.OwnKey(), same, delRev, ttl.TTL, g1.Token())
		}
		rerr := g2.Release(ctx)
		if held && rerr != nil {
			t.Fatalf("release g2: %v", rerr)
		}
		if held && !same {
			t.Logf("try %d: no lease reuse", tries)
		}
		_ = l.Close()
		_ = cli.Close()
	}
	t.Logf("%d tries, %d newer grants deleted", tries, hits)
}

// inFlightTxn models a request whose caller's context ended while it was
// on its way: once armed, the next Delete, or the next Txn's Commit,
// returns at the end of its context, and is applied later, when the gate
// opens.
type inFlightTxn struct {
	etcdlock.Client
	armed   bool
	gate    chan struct{}
	applied chan error
}

func (d *inFlightTxn) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	if !d.armed {
		return d.Client.Delete(ctx, key, opts...)
	}
	d.armed = false
	go func() {
		<-d.gate
		_, err := d.Client.Delete(context.Background(), key, opts...)
		d.applied <- err
	}()
	<-ctx.Done()
	return nil, ctx.Err()
}

func (d *inFlightTxn) Txn(ctx context.Context) clientv3.Txn {
	if !d.armed {
		return d.Client.Txn(ctx)
	}
	d.armed = false
	return &deferredTxn{d: d, ctx: ctx}
}

type deferredTxn struct {
	d            *inFlightTxn
	ctx          context.Context
	cmps         []clientv3.Cmp
	thens, elses []clientv3.Op
}

func (t *deferredTxn) If(c ...clientv3.Cmp) clientv3.Txn  { t.cmps = append(t.cmps, c...); return t }
func (t *deferredTxn) Then(o ...clientv3.Op) clientv3.Txn { t.thens = append(t.thens, o...); return t }
func (t *deferredTxn) Else(o ...clientv3.Op) clientv3.Txn { t.elses = append(t.elses, o...); return t }
func (t *deferredTxn) Commit() (*clientv3.TxnResponse, error) {
	go func() {
		<-t.d.gate
		_, err := t.d.Client.Txn(context.Background()).If(t.cmps...).Then(t.thens...).Else(t.elses...).Commit()
		t.d.applied <- err
	}()
	<-t.ctx.Done()
	return nil, t.ctx.Err()
}

// The same interleaving, deterministic: the first Release's request is
// still on its way when the retried Release succeeds and the key is
// granted again; the first request, applied last, must not remove the
// newer grant.
func TestReleaseAppliedAfterItsRetrySparesNewerGrant(t *testing.T) {
	t.Parallel()
	db := etcdserver.Shared(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: db.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	d := &inFlightTxn{Client: cli, gate: make(chan struct{}), applied: make(chan error, 1)}
	l, err := etcdlock.New(d, etcdlock.Options{Prefix: db.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	g1, err := l.Acquire(ctx, "k", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	d.armed = true
	rctx, rcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	if err := g1.Release(rctx); err == nil {
		t.Fatal("release with its request in flight succeeded")
	}
	rcancel()
	if err := g1.Release(ctx); err != nil {
		t.Fatalf("retried release: %v", err)
	}
	g2, err := l.Acquire(ctx, "k", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	el1, el2 := g1.(*etcdlock.Lease), g2.(*etcdlock.Lease)
	close(d.gate)
	if err := <-d.applied; err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Txn(ctx).If(el2.IsOwner()).Commit()
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Succeeded {
		t.Errorf("newer grant (token %d, key %s, same lease %v) deleted by the earlier grant's (token %d) cut-short release, applied after its retry",
			g2.Token(), el2.OwnKey(), el1.LeaseID() == el2.LeaseID(), g1.Token())
	}
	_ = g2.Release(ctx)
}

// gatedKeepAlive holds back the next KeepAliveOnce once armed, as if the
// goroutine sending it were descheduled just before it sent it.
type gatedKeepAlive struct {
	etcdlock.Client
	armed   atomic.Bool
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedKeepAlive) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.gate
	}
	return g.Client.KeepAliveOnce(ctx, id)
}

// A Renew that runs alongside its grant's Release (package guard's
// keep-alive racing the end of a critical section) sends its keep-alive
// after the release and after the key was granted again on the same
// lease. It must not extend the newer grant.
func TestRenewRacingReleaseDoesNotExtendNewerGrant(t *testing.T) {
	t.Parallel()
	db := etcdserver.Shared(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: db.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	gc := &gatedKeepAlive{Client: cli, entered: make(chan struct{}), gate: make(chan struct{})}
	l, err := etcdlock.New(gc, etcdlock.Options{Prefix: db.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	const ttl = 4 * time.Second
	g1, err := l.Acquire(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	gc.armed.Store(true)
	renewed := make(chan error, 1)
	go func() { renewed <- g1.Renew(ctx) }()
	<-gc.entered // g1's Renew is past its checks, its keep-alive not sent
	if err := g1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	g2, err := l.Acquire(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Release(ctx)
	el1, _ := locks.LeaseAs[*etcdlock.Lease](g1)
	el2, _ := locks.LeaseAs[*etcdlock.Lease](g2)
	if el1.LeaseID() != el2.LeaseID() {
		// A lease with a renewal in flight at its release serves no
		// other grant: the newer grant has a lease of its own.
		t.Logf("the newer grant has a lease of its own (%x, %x)", int64(el1.LeaseID()), int64(el2.LeaseID()))
	}
	// g2's holder stops renewing (crashed); its lease runs down.
	time.Sleep(2500 * time.Millisecond)
	before, err := cli.TimeToLive(ctx, el2.LeaseID())
	if err != nil {
		t.Fatal(err)
	}
	close(gc.gate)
	rerr := <-renewed
	after, err := cli.TimeToLive(ctx, el2.LeaseID())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("g1 (token %d) Renew: %v; g2 (token %d) lease left: %ds before, %ds after", g1.Token(), rerr, g2.Token(), before.TTL, after.TTL)
	if after.TTL > before.TTL {
		t.Errorf("the old grant's Renew extended the newer grant's lease from %ds to %ds left", before.TTL, after.TTL)
	}
}
