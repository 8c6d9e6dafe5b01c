package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/token"
)

// countingClient counts the scripts a locker sends.
type countingClient struct {
	*redis.Client
	scripts atomic.Int64
}

func (c *countingClient) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	c.scripts.Add(1)
	return c.Client.EvalSha(ctx, sha, keys, args...)
}

func (c *countingClient) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	c.scripts.Add(1)
	return c.Client.Eval(ctx, script, keys, args...)
}

// countingCluster is countingClient for a Cluster (still a Cluster client
// to the locker: ReloadState is the ClusterClient's).
type countingCluster struct {
	*redis.ClusterClient
	scripts atomic.Int64
}

func (c *countingCluster) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	c.scripts.Add(1)
	return c.ClusterClient.EvalSha(ctx, sha, keys, args...)
}

func (c *countingCluster) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	c.scripts.Add(1)
	return c.ClusterClient.Eval(ctx, script, keys, args...)
}

// snapshot is every key under prefix with its value (or type) and whether
// it expires.
func snapshot(t *testing.T, ctx context.Context, c *redis.Client, prefix string) map[string]string {
	t.Helper()
	keys, err := c.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, k := range keys {
		typ, err := c.Type(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		v := typ
		if typ == "string" {
			v, _ = c.Get(ctx, k).Result()
		}
		m[k] = v
	}
	return m
}

func tryAll(t *testing.T, ctx context.Context, l *redislock.Locker, keys ...string) []locks.Lease {
	t.Helper()
	leases, err := l.TryAcquireAll(ctx, keys, 10*time.Second)
	if err != nil {
		t.Fatalf("TryAcquireAll(%q): %v", keys, err)
	}
	return leases
}

func releaseAll(t *testing.T, ctx context.Context, leases []locks.Lease) {
	t.Helper()
	for _, l := range leases {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTryAcquireAllGrantsEveryKeyInOneScript(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	c := &countingClient{Client: newClient(t, db.Addr)}
	l := newLocker(t, c, redislock.Options{Prefix: db.Prefix})
	ctx := ctxFor(t, time.Minute)
	keys := []string{"a", "b", "c"}
	// Earlier single grants of two of the keys; c has no counter yet.
	before := map[string]token.Token{}
	for _, k := range keys[:2] {
		for range 3 {
			lease, err := l.TryAcquire(ctx, k, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			before[k] = lease.Token()
			releaseAll(t, ctx, []locks.Lease{lease})
		}
	}
	releaseAll(t, ctx, tryAll(t, ctx, l, "w", "x")) // loads the script
	sent := c.scripts.Load()
	leases := tryAll(t, ctx, l, keys...)
	if n := c.scripts.Load() - sent; n != 1 {
		t.Errorf("TryAcquireAll sent %d scripts, want 1", n)
	}
	if len(leases) != len(keys) {
		t.Fatalf("%d leases for %d keys", len(leases), len(keys))
	}
	for i, lease := range leases {
		if lease.Key() != keys[i] {
			t.Errorf("lease %d is %q's, want %q's", i, lease.Key(), keys[i])
		}
		if lease.Token() <= before[keys[i]] {
			t.Errorf("%q: token %d, not above its earlier grant's %d", keys[i], lease.Token(), before[keys[i]])
		}
		if lease.TTL() != 10*time.Second || time.Until(lease.Deadline()) > 10*time.Second || time.Until(lease.Deadline()) < 9*time.Second {
			t.Errorf("%q: TTL %v, deadline in %v", keys[i], lease.TTL(), time.Until(lease.Deadline()))
		}
		if _, err := l.TryAcquire(ctx, keys[i], time.Second); !errors.Is(err, locks.ErrNotObtained) {
			t.Errorf("TryAcquire(%q) while the set holds it: %v", keys[i], err)
		}
	}
	// Each lease renews and releases on its own.
	if err := leases[1].Renew(ctx); err != nil {
		t.Fatal(err)
	}
	releaseAll(t, ctx, leases)
	for i, k := range keys {
		lease, err := l.TryAcquire(ctx, k, 10*time.Second)
		if err != nil {
			t.Fatalf("TryAcquire(%q) after the set's release: %v", k, err)
		}
		if lease.Token() <= leases[i].Token() {
			t.Errorf("%q after the set: token %d, not above the set's %d", k, lease.Token(), leases[i].Token())
		}
		releaseAll(t, ctx, []locks.Lease{lease})
	}
}

// One held key refuses the whole set: the error names it, and nothing of
// the others changed — no lock, counter or queue key written — so later
// grants go on as if the try had never been.
func TestTryAcquireAllHeldKeyTakesNothing(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	c := newClient(t, db.Addr)
	l := newLocker(t, c, redislock.Options{Prefix: db.Prefix})
	ctx := ctxFor(t, time.Minute)
	last := map[string]token.Token{}
	for _, k := range []string{"a", "c"} {
		lease, err := l.TryAcquire(ctx, k, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		last[k] = lease.Token()
		releaseAll(t, ctx, []locks.Lease{lease})
	}
	// b is held, with a waiter queued behind it.
	held, err := l.Acquire(ctx, "b", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	last["b"] = held.Token()
	wctx, stopWaiter := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		lease, err := l.Acquire(wctx, "b", 10*time.Second)
		if err == nil {
			last["b"] = lease.Token()
			err = lease.Release(ctx)
		}
		waited <- err
	}()
	time.Sleep(100 * time.Millisecond)
	want := snapshot(t, ctx, c, db.Prefix)
	for _, keys := range [][]string{{"a", "b", "c"}, {"b", "c"}, {"a", "b"}} {
		_, err := l.TryAcquireAll(ctx, keys, 10*time.Second)
		if !errors.Is(err, locks.ErrNotObtained) || !strings.Contains(err.Error(), `"b"`) {
			t.Errorf("TryAcquireAll(%q) with b held: %v, want ErrNotObtained naming b", keys, err)
		}
	}
	if got := snapshot(t, ctx, c, db.Prefix); !mapsEqual(got, want) {
		t.Errorf("the refused tries changed Redis:\nbefore %v\nafter  %v", want, got)
	}
	for _, k := range []string{"a", "c"} {
		lease, err := l.TryAcquire(ctx, k, 10*time.Second)
		if err != nil {
			t.Fatalf("TryAcquire(%q) after the refused tries: %v", k, err)
		}
		if lease.Token() <= last[k] {
			t.Errorf("%q: token %d, not above %d", k, lease.Token(), last[k])
		}
		last[k] = lease.Token()
		releaseAll(t, ctx, []locks.Lease{lease})
	}
	// The waiter still comes first on b; then the set is granted.
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	stopWaiter()
	leases := tryAll(t, ctx, l, "a", "b", "c")
	for _, lease := range leases {
		if lease.Token() <= last[lease.Key()] {
			t.Errorf("%q in the set: token %d, not above %d", lease.Key(), lease.Token(), last[lease.Key()])
		}
	}
	releaseAll(t, ctx, leases)
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestTryAcquireAllRefusesBadArguments(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	c := &countingClient{Client: newClient(t, db.Addr)}
	l := newLocker(t, c, redislock.Options{Prefix: db.Prefix})
	ctx := ctxFor(t, time.Minute)
	for _, tc := range []struct {
		keys []string
		ttl  time.Duration
	}{
		{nil, time.Second},
		{[]string{}, time.Second},
		{[]string{"b", "a"}, time.Second},
		{[]string{"a", "a"}, time.Second},
		{[]string{"a", "b", "b"}, time.Second},
		{[]string{"", "a"}, time.Second},
		{[]string{"a", "b"}, 0},
	} {
		if _, err := l.TryAcquireAll(ctx, tc.keys, tc.ttl); !errors.Is(err, locks.ErrInvalidArgument) {
			t.Errorf("TryAcquireAll(%q, %v): %v, want ErrInvalidArgument", tc.keys, tc.ttl, err)
		}
	}
	if n := c.scripts.Load(); n != 0 {
		t.Errorf("%d scripts sent for bad arguments", n)
	}
	if got := snapshot(t, ctx, c.Client, db.Prefix); len(got) != 0 {
		t.Errorf("keys written: %v", got)
	}
}

// A context that is done before the call sends nothing; one cut short
// while the reply is on its way leaves nothing held once the script's
// command has finished (its clean-up hands each lock on).
func TestTryAcquireAllCancelledLeavesNothing(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	direct := newClient(t, db.Addr)
	ctx := ctxFor(t, time.Minute)

	c := &countingClient{Client: direct}
	l := newLocker(t, c, redislock.Options{Prefix: db.Prefix})
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.TryAcquireAll(done, []string{"a", "b"}, 10*time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("TryAcquireAll on a cancelled context: %v", err)
	}
	if n := c.scripts.Load(); n != 0 {
		t.Errorf("%d scripts sent on a cancelled context", n)
	}

	p := newHoldProxy(t, db.Addr)
	slow := newLocker(t, newClient(t, p.addr()), redislock.Options{Prefix: db.Prefix})
	// Warm the connection and load the script, so the cut call's script runs.
	releaseAll(t, ctx, tryAll(t, ctx, slow, "x", "y"))
	p.hold()
	cut, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := slow.TryAcquireAll(cut, []string{"a", "b", "c"}, 10*time.Second)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("TryAcquireAll cut short: %v", err)
	}
	// The script ran: the keys are held until its reply arrives and the
	// clean-up runs.
	if n, _ := direct.Exists(ctx, db.Prefix+"{a}", db.Prefix+"{b}", db.Prefix+"{c}").Result(); n != 3 {
		t.Logf("%d of the cut call's locks held while its reply is held back", n)
	}
	p.release()
	l2 := newLocker(t, direct, redislock.Options{Prefix: db.Prefix})
	deadline := time.Now().Add(2 * time.Second)
	for _, k := range []string{"a", "b", "c"} {
		for {
			lease, err := l2.TryAcquire(ctx, k, 10*time.Second)
			if err == nil {
				releaseAll(t, ctx, []locks.Lease{lease})
				break
			}
			if !errors.Is(err, locks.ErrNotObtained) || time.Now().After(deadline) {
				t.Fatalf("%q after the cut-short try: %v", k, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := slow.Close(); err != nil {
		t.Fatal(err)
	}
}

// Through package guard: a set tried in one round trip, and refused as a
// whole while a key is held.
func TestGuardTriesASetInOneScript(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	c := &countingClient{Client: newClient(t, db.Addr)}
	l := newLocker(t, c, redislock.Options{Prefix: db.Prefix})
	g, err := guard.New(l, guard.Options{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, time.Minute)
	releaseAll(t, ctx, tryAll(t, ctx, l, "w", "x")) // loads the script
	for _, n := range []int{2, 4, 8} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("k%d", i)
		}
		sent := c.scripts.Load()
		set, err := g.AcquireAll(ctx, keys...)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.scripts.Load() - sent; got != 1 {
			t.Errorf("AcquireAll of %d keys sent %d scripts, want 1", n, got)
		}
		if !slices.Equal(set.Keys(), keys) {
			t.Errorf("set keys %q", set.Keys())
		}
		if err := set.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// On a Cluster, keys of several slots are refused before anything is sent
// (package guard then takes them one by one); keys sharing a hash tag are
// tried in one script.
func TestClusterTryAcquireAllNeedsOneSlot(t *testing.T) {
	t.Parallel()
	cl := redisserver.NewCluster(t, 3, 0)
	ctx := ctxFor(t, time.Minute)
	cc := &countingCluster{ClusterClient: newClusterClient(t, cl, nil)}
	l := newLocker(t, cc, redislock.Options{Prefix: clusterPrefix()})
	// Names of different slots.
	a, b := "a", "b"
	if redisserver.KeySlot(a) == redisserver.KeySlot(b) {
		t.Fatal("a and b share a slot")
	}
	if _, err := l.TryAcquireAll(ctx, []string{a, b}, 10*time.Second); !errors.Is(err, locks.ErrInvalidArgument) {
		t.Errorf("TryAcquireAll across slots: %v, want ErrInvalidArgument", err)
	}
	if n := cc.scripts.Load(); n != 0 {
		t.Errorf("%d scripts sent across slots", n)
	}
	releaseAll(t, ctx, tryAll(t, ctx, l, "{order:7}:w", "{order:7}:x")) // loads the script
	sent := cc.scripts.Load()
	tagged := []string{"{order:7}:a", "{order:7}:b", "{order:7}:c"}
	leases := tryAll(t, ctx, l, tagged...)
	if n := cc.scripts.Load() - sent; n != 1 {
		t.Errorf("%d scripts sent for hash-tagged keys, want 1", n)
	}
	for _, k := range tagged {
		if _, err := l.TryAcquire(ctx, k, time.Second); !errors.Is(err, locks.ErrNotObtained) {
			t.Errorf("TryAcquire(%q) while the set holds it: %v", k, err)
		}
	}
	releaseAll(t, ctx, leases)

	// package guard falls back to one by one across slots.
	g, err := guard.New(l, guard.Options{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	set, err := g.TryAcquireAll(ctx, a, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Under a prefix with a hash tag of its own every lock shares a slot.
	one := newLocker(t, cc, redislock.Options{Prefix: "{" + clusterPrefix() + "}"})
	releaseAll(t, ctx, tryAll(t, ctx, one, a, b))
}

// On a Ring, the shard is chosen by a name's hash tag: keys of several
// tags are refused before anything is sent, keys of one tag are tried in
// one script.
func TestRingTryAcquireAllNeedsOneTag(t *testing.T) {
	t.Parallel()
	srvs := redisserver.NewN(t, 2)
	ctx := ctxFor(t, time.Minute)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"s0": srvs[0].Addr(), "s1": srvs[1].Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	l := newLocker(t, ring, redislock.Options{})
	if _, err := l.TryAcquireAll(ctx, []string{"a", "b"}, 10*time.Second); !errors.Is(err, locks.ErrInvalidArgument) {
		t.Errorf("TryAcquireAll across tags: %v, want ErrInvalidArgument", err)
	}
	leases := tryAll(t, ctx, l, "{order:7}:a", "{order:7}:b")
	for _, k := range []string{"{order:7}:a", "{order:7}:b"} {
		if _, err := l.TryAcquire(ctx, k, time.Second); !errors.Is(err, locks.ErrNotObtained) {
			t.Errorf("TryAcquire(%q) while the set holds it: %v", k, err)
		}
	}
	releaseAll(t, ctx, leases)
}

// A set's locks keep the lock-delay like a single grant's: the lock keys
// live TTL + LockDelay.
func TestTryAcquireAllKeepsTheLockDelay(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	c := newClient(t, db.Addr)
	l := newLocker(t, c, redislock.Options{Prefix: db.Prefix, LockDelay: 5 * time.Second})
	ctx := ctxFor(t, time.Minute)
	leases, err := l.TryAcquireAll(ctx, []string{"a", "b"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, lease := range leases {
		if lease.TTL() != time.Second {
			t.Errorf("%q: TTL %v, want 1s", lease.Key(), lease.TTL())
		}
		pttl, err := c.PTTL(ctx, db.Prefix+"{"+lease.Key()+"}").Result()
		if err != nil {
			t.Fatal(err)
		}
		if pttl <= 5*time.Second {
			t.Errorf("%q: the lock key lives %v, want over TTL + delay − slack (5s)", lease.Key(), pttl)
		}
	}
	releaseAll(t, ctx, leases)
}
