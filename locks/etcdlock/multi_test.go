package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
	"github.com/fenceguard/fenceguard/token"
)

// txnCounter counts the transactions a locker commits.
type txnCounter struct {
	*clientv3.Client
	n atomic.Int64
}

func (c *txnCounter) Txn(ctx context.Context) clientv3.Txn {
	c.n.Add(1)
	return c.Client.Txn(ctx)
}

// everything is every key under prefix with its create revision and lease.
func everything(t *testing.T, ctx context.Context, c *clientv3.Client, prefix string) map[string]string {
	t.Helper()
	resp, err := c.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, kv := range resp.Kvs {
		m[string(kv.Key)] = fmt.Sprintf("rev %d lease %x", kv.CreateRevision, kv.Lease)
	}
	return m
}

func tryAll(t *testing.T, ctx context.Context, l *etcdlock.Locker, keys ...string) []locks.Lease {
	t.Helper()
	leases, err := l.TryAcquireAll(ctx, keys, 10*time.Second)
	if err != nil {
		t.Fatalf("TryAcquireAll(%q): %v", keys, err)
	}
	return leases
}

func releaseAll(t *testing.T, ctx context.Context, leases ...locks.Lease) {
	t.Helper()
	for _, l := range leases {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTryAcquireAllGrantsEveryKeyInOneTxn(t *testing.T) {
	t.Parallel()
	d := etcdserver.Shared(t)
	c := &txnCounter{Client: newClient(t, d.Endpoints)}
	l := newLocker(t, c, d.Prefix)
	ctx := ctxFor(t, time.Minute)
	keys := []string{"a", "b", "c"}
	before := map[string]token.Token{}
	for _, k := range keys[:2] {
		lease, err := l.TryAcquire(ctx, k, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		before[k] = lease.Token()
		releaseAll(t, ctx, lease)
	}
	sent := c.n.Load()
	leases := tryAll(t, ctx, l, keys...)
	if n := c.n.Load() - sent; n != 1 {
		t.Errorf("TryAcquireAll committed %d transactions, want 1", n)
	}
	if len(leases) != len(keys) {
		t.Fatalf("%d leases for %d keys", len(leases), len(keys))
	}
	ids := map[clientv3.LeaseID]bool{}
	for i, lease := range leases {
		if lease.Key() != keys[i] {
			t.Errorf("lease %d is %q's, want %q's", i, lease.Key(), keys[i])
		}
		if lease.Token() <= before[keys[i]] {
			t.Errorf("%q: token %d, not above its earlier grant's %d", keys[i], lease.Token(), before[keys[i]])
		}
		el := lease.(*etcdlock.Lease)
		ids[el.LeaseID()] = true
		resp, err := c.Txn(ctx).If(el.IsOwner()).Commit()
		if err != nil || !resp.Succeeded {
			t.Errorf("%q: IsOwner does not hold: %v", keys[i], err)
		}
		if _, err := l.TryAcquire(ctx, keys[i], 2*time.Second); !errors.Is(err, locks.ErrNotObtained) {
			t.Errorf("TryAcquire(%q) while the set holds it: %v", keys[i], err)
		}
	}
	if len(ids) != len(keys) {
		t.Errorf("%d etcd leases for %d keys, want one each", len(ids), len(keys))
	}
	if err := leases[1].Renew(ctx); err != nil {
		t.Fatal(err)
	}
	releaseAll(t, ctx, leases...)
	for i, k := range keys {
		lease, err := l.TryAcquire(ctx, k, 10*time.Second)
		if err != nil {
			t.Fatalf("TryAcquire(%q) after the set's release: %v", k, err)
		}
		if lease.Token() <= leases[i].Token() {
			t.Errorf("%q after the set: token %d, not above the set's %d", k, lease.Token(), leases[i].Token())
		}
		releaseAll(t, ctx, lease)
	}
}

// One key held, or only queued for, refuses the whole set: the error names
// it, nothing is written, and the queued waiter comes first.
func TestTryAcquireAllHeldKeyTakesNothing(t *testing.T) {
	t.Parallel()
	d := etcdserver.Shared(t)
	c := newClient(t, d.Endpoints)
	l := newLocker(t, c, d.Prefix)
	ctx := ctxFor(t, time.Minute)
	held, err := l.Acquire(ctx, "b", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan locks.Lease, 1)
	go func() {
		lease, err := l.Acquire(ctx, "b", 10*time.Second)
		if err != nil {
			t.Error(err)
		}
		waited <- lease
	}()
	for len(everything(t, ctx, c, d.Prefix)) < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	want := everything(t, ctx, c, d.Prefix)
	for _, keys := range [][]string{{"a", "b", "c"}, {"b", "c"}, {"a", "b"}} {
		_, err := l.TryAcquireAll(ctx, keys, 10*time.Second)
		if !errors.Is(err, locks.ErrNotObtained) || !strings.Contains(err.Error(), `"b"`) {
			t.Errorf("TryAcquireAll(%q) with b held: %v, want ErrNotObtained naming b", keys, err)
		}
	}
	if got := everything(t, ctx, c, d.Prefix); !maps.Equal(got, want) {
		t.Errorf("the refused tries changed etcd:\nbefore %v\nafter  %v", want, got)
	}
	// The holder leaves; b's waiter is still ahead of any try.
	releaseAll(t, ctx, held)
	next := <-waited
	if _, err := l.TryAcquireAll(ctx, []string{"a", "b"}, 10*time.Second); !errors.Is(err, locks.ErrNotObtained) {
		t.Errorf("TryAcquireAll with b handed to its waiter: %v", err)
	}
	releaseAll(t, ctx, next)
	leases := tryAll(t, ctx, l, "a", "b", "c")
	if leases[1].Token() <= next.Token() {
		t.Errorf("b in the set: token %d, not above the waiter's %d", leases[1].Token(), next.Token())
	}
	releaseAll(t, ctx, leases...)
	if got := everything(t, ctx, c, d.Prefix); len(got) != 0 {
		t.Errorf("keys left: %v", got)
	}
}

func TestTryAcquireAllRefusesBadArguments(t *testing.T) {
	t.Parallel()
	d := etcdserver.Shared(t)
	c := &txnCounter{Client: newClient(t, d.Endpoints)}
	l := newLocker(t, c, d.Prefix)
	ctx := ctxFor(t, time.Minute)
	many := make([]string, etcdlock.MaxTxnKeys+1)
	for i := range many {
		many[i] = fmt.Sprintf("k%04d", i)
	}
	for _, tc := range []struct {
		keys []string
		ttl  time.Duration
	}{
		{nil, 2 * time.Second},
		{[]string{}, 2 * time.Second},
		{[]string{"b", "a"}, 2 * time.Second},
		{[]string{"a", "a"}, 2 * time.Second},
		{[]string{"", "a"}, 2 * time.Second},
		{[]string{"a", "b"}, time.Millisecond},
		{many, 2 * time.Second},
	} {
		if _, err := l.TryAcquireAll(ctx, tc.keys, tc.ttl); !errors.Is(err, locks.ErrInvalidArgument) {
			t.Errorf("TryAcquireAll(%d keys %.20q, %v): %v, want ErrInvalidArgument", len(tc.keys), tc.keys, tc.ttl, err)
		}
	}
	if n := c.n.Load(); n != 0 {
		t.Errorf("%d transactions sent for bad arguments", n)
	}
}

// A context that is done before the call sends nothing; a transaction
// applied whose reply is lost leaves nothing held once the clean-up (a
// revoke of every lease) has run.
func TestTryAcquireAllCancelledLeavesNothing(t *testing.T) {
	t.Parallel()
	d := etcdserver.Shared(t)
	c := newClient(t, d.Endpoints)
	ctx := ctxFor(t, time.Minute)
	counted := &txnCounter{Client: c}
	l := newLocker(t, counted, d.Prefix)
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.TryAcquireAll(done, []string{"a", "b"}, 10*time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("TryAcquireAll on a cancelled context: %v", err)
	}
	if n := counted.n.Load(); n != 0 {
		t.Errorf("%d transactions sent on a cancelled context", n)
	}

	lost := newLocker(t, &lostReply{Client: c}, d.Prefix)
	if _, err := lost.TryAcquireAll(ctx, []string{"a", "b", "c"}, 10*time.Second); err == nil {
		t.Fatal("TryAcquireAll succeeded: the lost reply did not bite")
	}
	keysGone(t, d.Prefix, func() []string { return slices.Collect(maps.Keys(everything(t, ctx, c, d.Prefix))) })
	releaseAll(t, ctx, tryAll(t, ctx, l, "a", "b", "c")...)
}

// Through package guard: a set is tried in one transaction.
func TestGuardTriesASetInOneTxn(t *testing.T) {
	t.Parallel()
	d := etcdserver.Shared(t)
	c := &txnCounter{Client: newClient(t, d.Endpoints)}
	l := newLocker(t, c, d.Prefix)
	g, err := guard.New(l, guard.Options{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, time.Minute)
	for _, n := range []int{2, 4, 8} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("k%d", i)
		}
		sent := c.n.Load()
		set, err := g.AcquireAll(ctx, keys...)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.n.Load() - sent; got != 1 {
			t.Errorf("AcquireAll of %d keys committed %d transactions, want 1", n, got)
		}
		if err := set.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A set's grants keep the lock-delay like a single grant's: each etcd
// lease is granted for TTL + LockDelay.
func TestTryAcquireAllKeepsTheLockDelay(t *testing.T) {
	t.Parallel()
	d := etcdserver.Shared(t)
	c := newClient(t, d.Endpoints)
	l, err := etcdlock.New(c, etcdlock.Options{Prefix: d.Prefix, LockDelay: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx := ctxFor(t, time.Minute)
	leases, err := l.TryAcquireAll(ctx, []string{"a", "b"}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, lease := range leases {
		resp, err := c.TimeToLive(ctx, lease.(*etcdlock.Lease).LeaseID())
		if err != nil {
			t.Fatal(err)
		}
		if resp.GrantedTTL != 7 {
			t.Errorf("%q: etcd lease of %ds, want TTL + delay, 7s", lease.Key(), resp.GrantedTTL)
		}
	}
	releaseAll(t, ctx, leases...)
}
