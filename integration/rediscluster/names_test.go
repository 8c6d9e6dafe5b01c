package rediscluster

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/token"
)

func newClusterClient(t *testing.T, c *redisserver.Cluster, set func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	o := &redis.ClusterOptions{Addrs: c.Addrs(), Dialer: c.Dialer(), MaxRetries: -1, ContextTimeoutEnabled: true}
	if set != nil {
		set(o)
	}
	cc := redis.NewClusterClient(o)
	t.Cleanup(func() { cc.Close() })
	if err := cc.ForEachShard(context.Background(), func(ctx context.Context, s *redis.Client) error { return s.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	return cc
}

// oddNames are lock names with braces, empty, very long, non-UTF-8.
var oddNames = []string{
	"}", "}x", "{", "{}", "}{", "a}b", "a{b}c", "a}", "a}:tok", "a", "{a}", "a}:q", "\xff\xfe}", "\xff{\x00}",
	"\x00", strings.Repeat("}", 3), strings.Repeat("n", 100_000), "é}",
}

// namesOn runs every lock operation on every odd name through l (and a
// Sequencer and a Fence on c) and fails on a panic, an untyped error, or a
// name that works for some operations and not others. It then holds every
// usable name at once: two names sharing a key would make one TryAcquire
// fail.
func namesOn(t *testing.T, where string, c redislock.Client, fc redislock.FenceClient, cluster bool) {
	ctx := itest.Ctx(t, 30*time.Second)
	prefix := "r19b:" + where + ":"
	l := newLocker(t, c, redislock.Options{Prefix: prefix})
	seq := redislock.NewSequencer(c, prefix)
	fence := redislock.NewFence(fc, redislock.FenceOptions{Prefix: prefix + "f:", Check: token.NoCheck()})
	var held []locks.Lease
	defer func() {
		for _, le := range held {
			_ = le.Release(ctx)
		}
	}()
	usable := map[string]bool{}
	for _, name := range oddNames {
		show := name
		if len(show) > 20 {
			show = show[:20] + "…"
		}
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s %q: panic %v", where, show, p)
				}
			}()
			errs := map[string]error{}
			le, err := l.TryAcquire(ctx, name, 5*time.Second)
			errs["TryAcquire"] = err
			_, errs["Heal"] = l.Heal(ctx, name, 0)
			_, errs["Issued"] = l.Issued(ctx, name)
			_, errs["Current"] = seq.Current(ctx, name)
			errs["Claim"] = fence.Claim(ctx, name, 5)
			invalid := 0
			for op, e := range errs {
				switch {
				case e == nil:
				case errors.Is(e, locks.ErrInvalidArgument) || errors.Is(e, token.ErrNoResource):
					invalid++
				default:
					t.Errorf("%s %q: %s: untyped error %v", where, show, op, e)
				}
			}
			if err == nil {
				usable[name] = true
				held = append(held, le)
				if cur, err := seq.Current(ctx, name); err != nil || cur != le.Token() {
					t.Errorf("%s %q: Current = %d, %v; holder %d", where, show, cur, err, le.Token())
				}
				if issued, err := l.Issued(ctx, name); err != nil || issued < le.Token() {
					t.Errorf("%s %q: Issued = %d, %v; holder %d", where, show, issued, err, le.Token())
				}
			}
			lockRefused := errors.Is(errs["TryAcquire"], locks.ErrInvalidArgument)
			for _, op := range []string{"Heal", "Issued", "Current"} {
				if lockRefused != errors.Is(errs[op], locks.ErrInvalidArgument) {
					t.Errorf("%s %q: TryAcquire %v but %s %v", where, show, errs["TryAcquire"], op, errs[op])
				}
			}
			t.Logf("%s %q: TryAcquire %v", where, show, err)
		}()
	}
	if cluster {
		for _, n := range []string{"}", "}x", "}{", "}}}"} {
			if usable[n] {
				t.Errorf("%s: %q (empty hash tag) was granted on a Cluster", where, n)
			}
		}
	}
	// Every granted name is still held: nothing released another's key.
	for _, le := range held {
		if err := le.Renew(ctx); err != nil {
			t.Errorf("%s %q: renew after the others were taken: %v", where, le.Key(), err)
		}
	}
}

// TestIssuedEmptyKeyRefused: on a single node, Locker.Issued("") is refused
// with locks.ErrInvalidArgument, as Acquire, TryAcquire, Heal and Current refuse the
// empty key (on a Cluster client by the hash-tag check too).
func TestIssuedEmptyKeyRefused(t *testing.T) {
	ctx := itest.Ctx(t, 10*time.Second)
	db := redisserver.Shared(t)
	c := newClient(t, db.Addr)
	l := newLocker(t, c, redislock.Options{Prefix: db.Prefix})
	if v, err := l.Issued(ctx, ""); !errors.Is(err, locks.ErrInvalidArgument) {
		t.Errorf("Issued(\"\") = %d, %v; want locks.ErrInvalidArgument like Acquire, Heal and Current", v, err)
	}
}

// TestOddLockNamesStandalone and TestOddLockNamesCluster: lock
// names with braces, empty, 100 kB, non-UTF-8: typed errors, no panic, no
// two names sharing keys; names with an empty hash tag refused on Cluster.
func TestOddLockNamesStandalone(t *testing.T) {
	db := redisserver.Shared(t)
	c := newClient(t, db.Addr)
	namesOn(t, "standalone", c, c, false)
}

func TestOddLockNamesCluster(t *testing.T) {
	rc := redisserver.NewCluster(t, 3, 0)
	cc := newClusterClient(t, rc, nil)
	namesOn(t, "cluster", cc, cc, true)
	// Prefixes holding "{}" (an empty first tag) are refused too, for
	// every name; a prefix with a tag of its own works (one slot).
	ctx := itest.Ctx(t, 10*time.Second)
	for _, p := range []string{"a{}b:", "{}", "x}{}"} {
		l := newLocker(t, cc, redislock.Options{Prefix: p})
		if _, err := l.TryAcquire(ctx, "n", time.Second); !errors.Is(err, locks.ErrInvalidArgument) {
			t.Errorf("prefix %q: TryAcquire %v, want ErrInvalid", p, err)
		}
		if _, err := redislock.NewSequencer(cc, p).Current(ctx, "n"); !errors.Is(err, locks.ErrInvalidArgument) {
			t.Errorf("prefix %q: Current %v, want ErrInvalid", p, err)
		}
	}
	l := newLocker(t, cc, redislock.Options{Prefix: "t{tag}:"})
	for _, n := range []string{"}", "a", "b}"} {
		le, err := l.TryAcquire(ctx, n, time.Second)
		if err != nil {
			t.Errorf("prefix with its own tag, name %q: %v", n, err)
			continue
		}
		_ = le.Release(ctx)
	}
}

// TestClusterMigrationMidway: while a lock's slot is halfway through
// a migration (held there 1.5 s), the holder's Renew goes on, a
// TryAcquire with a short deadline returns by it with the context's error,
// and calls made with a longer one (TryAcquire, Issued, Current, Release,
// a fence claim with Replicas 1) finish correctly once the slot has moved;
// the next grant's token is larger. A Release whose context ends midway
// fails with its error and leaves the holder able to renew (it knows it
// still holds the lock). goleak (TestMain) checks that nothing leaked.
// A ReadOnly cluster Sequencer routed next to a stalled replica answers
// the holder's token only.
func TestClusterMigrationMidway(t *testing.T) {
	ctx := itest.Ctx(t, 90*time.Second)
	rc := redisserver.NewClusterWith(t, redisserver.ClusterOptions{Masters: 2, ReplicasPerMaster: 1, Links: true})
	cc := newClusterClient(t, rc, nil)
	l := newLocker(t, cc, redislock.Options{Prefix: "mig:"})
	l2 := newLocker(t, cc, redislock.Options{Prefix: "mig:"})
	const key = "m"
	lockKey := "mig:{" + key + "}"
	from, err := rc.MasterForKey(ctx, lockKey)
	if err != nil {
		t.Fatal(err)
	}
	masters, err := rc.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var to *harness.Server
	for _, m := range masters {
		if m != from {
			to = m
		}
	}
	a, err := l.TryAcquire(ctx, key, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fence := redislock.NewFence(cc, redislock.FenceOptions{Check: token.NoCheck(), Replicas: 1})
	if err := fence.Claim(ctx, key, a.Token()); err != nil {
		t.Fatal(err)
	}

	type res struct {
		op      string
		err     error
		dur     time.Duration
		allowed time.Duration // how long a call cut short by its context may take
		v       any
	}
	var (
		mu      sync.Mutex
		results []res
		wg      sync.WaitGroup
	)
	record := func(op string, d time.Duration, f func(ctx context.Context) (any, error)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			tm := itest.StartTiming(t)
			v, err := f(cctx)
			dur, late := tm.StopAllowing(700*time.Millisecond, d)
			mu.Lock()
			results = append(results, res{op, err, dur, d + late, v})
			mu.Unlock()
		}()
	}
	midway := func(mctx context.Context) error {
		// The slot is MIGRATING/IMPORTING and the lock's keys are on the
		// target.
		rctx, cancel := context.WithTimeout(mctx, time.Second)
		err := a.Renew(rctx)
		cancel()
		if err != nil {
			t.Errorf("Renew midway: %v", err)
		}
		record("short TryAcquire", 300*time.Millisecond, func(c context.Context) (any, error) { return l2.TryAcquire(c, key, time.Second) })
		record("short Acquire", 300*time.Millisecond, func(c context.Context) (any, error) { return l2.Acquire(c, key, time.Second) })
		record("TryAcquire", 20*time.Second, func(c context.Context) (any, error) { return l2.TryAcquire(c, key, time.Second) })
		record("Issued", 20*time.Second, func(c context.Context) (any, error) { return l.Issued(c, key) })
		record("Current", 20*time.Second, func(c context.Context) (any, error) { return l.Current(c, key) })
		record("Claim", 20*time.Second, func(c context.Context) (any, error) { return nil, fence.Claim(c, key, a.Token()) })
		time.Sleep(300 * time.Millisecond)
		record("Release", 20*time.Second, func(c context.Context) (any, error) { return nil, a.Release(c) })
		time.Sleep(1200 * time.Millisecond)
		return nil
	}
	if err := rc.Migrate(ctx, redisserver.KeySlot(lockKey), to, redisserver.MigrateOptions{Midway: midway}); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for _, r := range results {
		t.Logf("%s: %v after %v (%v)", r.op, r.err, r.dur.Round(time.Millisecond), r.v)
		switch r.op {
		case "short TryAcquire", "short Acquire":
			if !errors.Is(r.err, context.DeadlineExceeded) || r.dur > r.allowed {
				t.Errorf("%s: %v after %v, want the context's error by its deadline (allowed %v)", r.op, r.err, r.dur, r.allowed)
			}
		case "TryAcquire":
			// Started while A held the lock; it waited out the move, then
			// found it held — or free, if A's Release went first.
			if r.err != nil && !errors.Is(r.err, locks.ErrNotObtained) {
				t.Errorf("TryAcquire midway: %v", r.err)
			}
			if le, ok := r.v.(locks.Lease); ok && r.err == nil {
				if le.Token() <= a.Token() {
					t.Errorf("token %d after %d", le.Token(), a.Token())
				}
				_ = le.Release(ctx)
			}
		default:
			if r.err != nil {
				t.Errorf("%s midway: %v", r.op, r.err)
			}
		}
	}
	if got, _ := rc.MasterForKey(ctx, lockKey); got != to {
		t.Fatalf("the slot did not move")
	}
	// A TTL that outlasts the migration back however busy the machine:
	// the holder must still hold when it renews after it.
	n, err := l2.TryAcquire(ctx, key, 20*time.Second)
	if err != nil {
		t.Fatalf("after the move and A's release: %v", err)
	}
	if n.Token() <= a.Token() {
		t.Errorf("token %d after the move, A had %d", n.Token(), a.Token())
	}
	if err := fence.Claim(ctx, key, n.Token()); err != nil {
		t.Errorf("claim after the move: %v", err)
	}
	if err := fence.Claim(ctx, key, a.Token()); err == nil {
		t.Errorf("stale holder admitted after the move")
	}

	// Release cut short midway: the holder can tell it still holds.
	if err := rc.Migrate(ctx, redisserver.KeySlot(lockKey), from, redisserver.MigrateOptions{Midway: func(context.Context) error {
		rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		tm := itest.StartTiming(t)
		err := n.Release(rctx)
		took, late := tm.StopAllowing(800*time.Millisecond, 200*time.Millisecond)
		if allowed := 200*time.Millisecond + late; !errors.Is(err, context.DeadlineExceeded) || took > allowed {
			t.Errorf("Release with a short context midway: %v after %v (allowed %v)", err, took, allowed)
		}
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	if err := n.Renew(ctx); err != nil {
		t.Errorf("Renew after a Release that timed out midway: %v (the holder cannot know its state)", err)
	}
	if err := n.Release(ctx); err != nil {
		t.Errorf("Release after the move: %v", err)
	}

	// A ReadOnly, RouteRandomly client next to a replica whose replication
	// is blackholed: the Sequencer still answers the holder's token.
	m, err := rc.MasterForKey(ctx, lockKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Link(m).Blackhole(); err != nil {
		t.Fatal(err)
	}
	defer rc.Link(m).Restore()
	h, err := l.TryAcquire(ctx, key, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, set := range []func(*redis.ClusterOptions){
		func(o *redis.ClusterOptions) { o.ReadOnly = true },
		func(o *redis.ClusterOptions) { o.RouteRandomly = true },
		// Not RouteByLatency: go-redis v9.23.0 starts a new node's latency
		// probe before it finishes setting up the node's client, a data
		// race the race detector reports.
	} {
		ro := newClusterClient(t, rc, set)
		a, r := itest.CheckSequencer(t, ctx, "cluster replica routing", redislock.NewSequencer(ro, "mig:"), key, h.Token(), 20)
		lro := newLocker(t, ro, redislock.Options{Prefix: "mig:"})
		if cur, err := lro.Current(ctx, key); err != nil && !errors.Is(err, redislock.ErrReplica) || err == nil && cur != h.Token() {
			t.Errorf("Locker.Current on a replica-routing client: %d, %v", cur, err)
		}
		t.Logf("replica routing: %d answers, %d refusals", a, r)
	}
	if err := rc.Link(m).Restore(); err != nil {
		t.Fatal(err)
	}
	_ = h.Release(ctx)
}
