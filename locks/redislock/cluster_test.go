package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/lockstest"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/fencetest"
)

// newClusterClient is a ClusterClient on c, reaching the nodes directly
// (also when they announce Links), with short timeouts so a dead node
// fails calls fast.
func newClusterClient(t testing.TB, c *redisserver.Cluster, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *redis.ClusterClient {
	t.Helper()
	if dial == nil {
		dial = c.Dialer()
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: c.Addrs(), Dialer: dial,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		MaxRedirects: 8,
	})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

var clusterPrefixes atomic.Int64

func clusterPrefix() string { return fmt.Sprintf("fg:c%d:", clusterPrefixes.Add(1)) }

// cutDialer dials through until cut, then closes what it dialed and
// refuses new connections: the network between a client and every node
// goes away (a Proxy cannot do it: the client learns the nodes' own
// addresses from CLUSTER SLOTS).
type cutDialer struct {
	mu    sync.Mutex
	next  func(ctx context.Context, network, addr string) (net.Conn, error)
	cut   bool
	conns []net.Conn
}

func (d *cutDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut {
		return nil, fmt.Errorf("dial %s: cut off", addr)
	}
	conn, err := d.next(ctx, network, addr)
	if err == nil {
		d.conns = append(d.conns, conn)
	}
	return conn, err
}

func (d *cutDialer) Cut() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cut = true
	for _, c := range d.conns {
		c.Close()
	}
}

// The conformance suites of the Locker and the Fence, through a
// ClusterClient on a 3-master cluster with a replica each.
func TestClusterConformance(t *testing.T) {
	t.Parallel()
	c := redisserver.NewCluster(t, 3, 1)
	var mu sync.Mutex
	prefixes := map[locks.Locker]string{}
	newL := func(t *testing.T, cc *redis.ClusterClient) locks.Locker {
		p := clusterPrefix()
		l := newLocker(t, cc, redislock.Options{Prefix: p})
		mu.Lock()
		prefixes[l] = p
		mu.Unlock()
		return l
	}
	t.Run("Locker", func(t *testing.T) {
		lockstest.Run(t, lockstest.Config{
			NewLocker: func(t *testing.T) locks.Locker { return newL(t, newClusterClient(t, c, nil)) },
			NewSequencer: func(t *testing.T, l locks.Locker) token.Sequencer {
				mu.Lock()
				defer mu.Unlock()
				return redislock.NewSequencer(newClusterClient(t, c, nil), prefixes[l])
			},
			Unreachable: func(t *testing.T) (locks.Locker, func()) {
				d := &cutDialer{next: c.Dialer()}
				return newL(t, newClusterClient(t, c, d.dial)), d.Cut
			},
		})
	})
	for _, replicas := range []int{0, 1} {
		t.Run(fmt.Sprintf("Fence/Replicas=%d", replicas), func(t *testing.T) {
			fencetest.Run(t, func(t *testing.T, check token.Check) fencetest.Subject {
				f := redislock.NewFence(newClusterClient(t, c, nil), redislock.FenceOptions{
					Prefix: clusterPrefix(), Check: check, Logger: discard, Replicas: replicas})
				return fencetest.Subject{Fence: f, HighWater: f.HighWater}
			})
		})
	}
}

// lockKeyNames are the keys redislock keeps for the lock name under
// prefix (doc.go: all carry the hash tag {name}), with and without the tag.
func lockKeyNames(prefix, name string, tagged bool) []string {
	base := prefix + name
	if tagged {
		base = prefix + "{" + name + "}"
	}
	return []string{base, base + ":tok", base + ":q", base + ":qd", base + ":wake"}
}

// All keys of a lock live in the slot of its name's hash tag — for names
// whose keys would be spread over several masters without the tag — and
// no key of it is anywhere else.
func TestClusterLockKeysShareASlot(t *testing.T) {
	t.Parallel()
	c := redisserver.NewCluster(t, 3, 1)
	ctx := ctxFor(t, time.Minute)
	prefix := clusterPrefix()
	masters, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	owner := func(key string) *harness.Server {
		m, err := c.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	// Names whose untagged keys span several masters.
	var names []string
	for i := 0; len(names) < 4; i++ {
		name := fmt.Sprintf("lock-%d", i)
		spread := map[*harness.Server]bool{}
		for _, k := range lockKeyNames(prefix, name, false) {
			spread[owner(k)] = true
		}
		if len(spread) > 1 {
			names = append(names, name)
		}
	}
	cc := newClusterClient(t, c, nil)
	l := newLocker(t, cc, redislock.Options{Prefix: prefix})
	for _, name := range names {
		slot := redisserver.KeySlot(name)
		for _, k := range lockKeyNames(prefix, name, true) {
			if s := redisserver.KeySlot(k); s != slot {
				t.Fatalf("key %s in slot %d, the name %s in %d", k, s, name, slot)
			}
		}
		// Hold it with a waiter queued, so the queue keys exist too.
		lease, err := l.Acquire(ctx, name, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		waited := make(chan error, 1)
		go func() {
			l2, err := l.Acquire(ctx, name, 10*time.Second)
			if err == nil {
				err = l2.Release(ctx)
			}
			waited <- err
		}()
		time.Sleep(100 * time.Millisecond)
		home := owner(name)
		for _, m := range masters {
			rc := newClient(t, m.Addr())
			keys, err := rc.Keys(ctx, prefix+"{"+name+"}*").Result()
			if err != nil {
				t.Fatal(err)
			}
			if m != home && len(keys) > 0 {
				t.Errorf("lock %s: keys %v on %s, its slot %d is on %s", name, keys, m.Name(), slot, home.Name())
			}
			if m == home && len(keys) < 4 { // lock, counter, queue, deadlines
				t.Errorf("lock %s: %d keys on its master %s: %v", name, len(keys), m.Name(), keys)
			}
			for _, k := range keys {
				if s, err := rc.ClusterKeySlot(ctx, k).Result(); err != nil || int(s) != slot {
					t.Errorf("CLUSTER KEYSLOT %s = %d, %v; want %d", k, s, err, slot)
				}
			}
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-waited; err != nil {
			t.Fatal(err)
		}
	}
}

// Names with braces still keep each lock in one slot (a script across
// slots would fail with CROSSSLOT); a prefix with a hash tag of its own
// puts every lock in that tag's slot.
func TestClusterBracesInNamesAndPrefixes(t *testing.T) {
	t.Parallel()
	c := redisserver.NewCluster(t, 3, 1)
	ctx := ctxFor(t, time.Minute)
	cc := newClusterClient(t, c, nil)
	use := func(l *redislock.Locker, name string) {
		t.Helper()
		lease, err := l.Acquire(ctx, name, 10*time.Second)
		if err != nil {
			t.Fatalf("Acquire(%q): %v", name, err)
		}
		waited := make(chan error, 1)
		go func() { // queued, so the queue's keys are touched too
			l2, err := l.Acquire(ctx, name, 10*time.Second)
			if err == nil {
				err = l2.Release(ctx)
			}
			waited <- err
		}()
		time.Sleep(50 * time.Millisecond)
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("Release(%q): %v", name, err)
		}
		if err := <-waited; err != nil {
			t.Fatalf("queued Acquire(%q): %v", name, err)
		}
	}
	prefix := clusterPrefix()
	l := newLocker(t, cc, redislock.Options{Prefix: prefix})
	for _, name := range []string{"a}b", "{x}", "x{y}z", "{", "{}"} {
		slot := redisserver.KeySlot(prefix + "{" + name + "}")
		for _, k := range lockKeyNames(prefix, name, true) {
			if s := redisserver.KeySlot(k); s != slot {
				t.Errorf("name %q: key %s in slot %d, the lock in %d", name, k, s, slot)
			}
		}
		use(l, name)
	}
	// A name that starts with '}' (or a prefix with "{}") would give its
	// keys an empty hash tag, each its own slot: refused on a Cluster.
	for _, tc := range []struct{ prefix, name string }{{prefix, "}"}, {prefix, "}{"}, {prefix, "}x{y}"}, {"fg:{}:", "x"}} {
		bad := newLocker(t, cc, redislock.Options{Prefix: tc.prefix})
		if _, err := bad.Acquire(ctx, tc.name, time.Second); !errors.Is(err, locks.ErrInvalidArgument) {
			t.Errorf("Acquire(%q) with prefix %q: %v, want ErrInvalidArgument", tc.name, tc.prefix, err)
		}
		if _, err := bad.TryAcquire(ctx, tc.name, time.Second); !errors.Is(err, locks.ErrInvalidArgument) {
			t.Errorf("TryAcquire(%q) with prefix %q: %v, want ErrInvalidArgument", tc.name, tc.prefix, err)
		}
		if _, err := redislock.NewSequencer(cc, tc.prefix).Current(ctx, tc.name); !errors.Is(err, locks.ErrInvalidArgument) {
			t.Errorf("Sequencer.Current(%q) with prefix %q: %v, want ErrInvalidArgument", tc.name, tc.prefix, err)
		}
		// The same on one node works: every key is in the one node.
		single := redisserver.Shared(t)
		ls := newLocker(t, newClient(t, single.Addr), redislock.Options{Prefix: single.Prefix + tc.prefix})
		lease, err := ls.Acquire(ctx, tc.name, time.Second)
		if err != nil {
			t.Fatalf("single node: Acquire(%q): %v", tc.name, err)
		}
		_ = lease.Release(ctx)
	}
	tagged := newLocker(t, cc, redislock.Options{Prefix: "fg:{all}:"})
	for _, name := range []string{"lock-1", "lock-2", "lock-3"} {
		for _, k := range lockKeyNames("fg:{all}:", name, true) {
			if s := redisserver.KeySlot(k); s != redisserver.KeySlot("all") {
				t.Errorf("prefix fg:{all}: key %s in slot %d, not the tag's %d", k, s, redisserver.KeySlot("all"))
			}
		}
		use(tagged, name)
	}
}

// A Fence with Replicas sends WAIT to the master of the mark's slot — the
// one that ran the script — through failovers and resharding: pausing
// that master's replica makes the claim unacknowledged, pausing the other
// replicas does not. After a failover or a move its slot map is stale:
// the claim follows MOVED and ASK instead of failing.
func TestClusterFenceWAITReachesTheKeysMaster(t *testing.T) {
	t.Parallel() // mostly waiting for cluster-node-timeout and elections
	c := redisserver.NewCluster(t, 3, 1)
	ctx := ctxFor(t, 2*time.Minute)
	prefix := clusterPrefix()
	cc := newClusterClient(t, c, nil)
	f := redislock.NewFence(cc, redislock.FenceOptions{Prefix: prefix, Check: token.NoCheck(), Replicas: 1, ReplicaTimeout: 500 * time.Millisecond})
	const res = "r"
	key := prefix + "{" + res + "}"
	tok := token.Token(0)
	claim := func(what string) error {
		t.Helper()
		tok++
		err := f.Claim(ctx, res, tok)
		t.Logf("%s: claim %d: %v", what, tok, err)
		return err
	}
	replicaOf := func(m *harness.Server) *harness.Server {
		t.Helper()
		reps, err := c.Replicas(ctx, m)
		if err != nil || len(reps) != 1 {
			t.Fatalf("replicas of %s: %v, %v", m.Name(), reps, err)
		}
		return reps[0]
	}
	// paused runs fn with the given servers paused.
	midway := false
	paused := func(fn func() error, srvs ...*harness.Server) error {
		t.Helper()
		for _, s := range srvs {
			if err := s.Pause(); err != nil {
				t.Fatal(err)
			}
		}
		defer func() {
			for _, s := range srvs {
				if err := s.Resume(); err != nil {
					t.Fatal(err)
				}
			}
			if !midway { // a slot in migration is not healthy
				if err := c.WaitHealthy(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}()
		return fn()
	}
	// check: the claim is acknowledged with the replicas of the other
	// masters paused, refused with m's replica paused.
	check := func(what string, m *harness.Server) {
		t.Helper()
		var others []*harness.Server
		ms, _ := c.Masters(ctx)
		for _, o := range ms {
			if o != m {
				others = append(others, replicaOf(o))
			}
		}
		if err := paused(func() error { return claim(what + ", other replicas paused") }, others...); err != nil {
			t.Fatalf("%s: claim with the replicas of the other masters paused: %v", what, err)
		}
		err := paused(func() error { return claim(what + ", its replica paused") }, replicaOf(m))
		var re *redislock.ReplicaError
		if !errors.As(err, &re) || re.Acked != 0 {
			t.Fatalf("%s: claim with the replica of %s paused: %v, want a ReplicaError (0 acknowledged)", what, m.Name(), err)
		}
	}

	m, err := c.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := claim("first"); err != nil {
		t.Fatal(err)
	}
	check("steady", m)

	// A failover: the client's slot map still names m, now a replica.
	m2, err := c.Failover(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if err := claim("after failover"); err != nil {
		t.Fatalf("claim after the failover: %v", err)
	}
	check("after failover", m2)

	// Resharding: the slot moves to another master; claims midway follow
	// ASK to the target, whose replica must acknowledge them.
	var to *harness.Server
	ms, _ := c.Masters(ctx)
	for _, o := range ms {
		if o != m2 {
			to = o
		}
	}
	toReplica := replicaOf(to)
	err = c.Migrate(ctx, redisserver.KeySlot(key), to, redisserver.MigrateOptions{Midway: func(context.Context) error {
		midway = true
		defer func() { midway = false }()
		if err := claim("midway"); err != nil {
			return fmt.Errorf("claim while the slot moves: %w", err)
		}
		var re *redislock.ReplicaError
		if err := paused(func() error { return claim("midway, target's replica paused") }, toReplica); !errors.As(err, &re) {
			return fmt.Errorf("claim midway with the target's replica paused: %v, want a ReplicaError", err)
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := claim("after the move"); err != nil {
		t.Fatalf("claim after the move: %v", err)
	}
	check("after the move", to)
	if hw, err := f.HighWater(ctx, res); err != nil || hw != tok {
		t.Fatalf("HighWater %d, %v; want %d", hw, err, tok)
	}
}

// While a lock's slot migrates, Redis refuses a script whose keys are not
// all on one side with TRYAGAIN — the lock's scripts name four keys, and
// the queue keys exist only while someone waits — for as long as the
// migration lasts. The Locker and the Sequencer retry it until their
// context ends: calls made midway wait for the move and then succeed, and a
// waiter with a short deadline returns by it. Renew (one key) and Current
// of a held lock (both its keys moved) are served midway. Control: the same
// four keys in one EVAL through the ClusterClient get TRYAGAIN midway, after
// go-redis's own retries.
func TestClusterLockCallsWaitForMigration(t *testing.T) {
	t.Parallel()
	c := redisserver.NewCluster(t, 2, 0)
	// go-redis's defaults: it retries TRYAGAIN and follows ASK 3 times,
	// within milliseconds; the migration stays midway for a second.
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), Dialer: c.Dialer()})
	t.Cleanup(func() { _ = cc.Close() })
	ctx := ctxFor(t, 40*time.Second)
	prefix := clusterPrefix()
	l := newLocker(t, cc, redislock.Options{Prefix: prefix})
	slot := redisserver.KeySlot(prefix + "{A}")
	// B and C: names in A's slot.
	var same []string
	for i := 0; len(same) < 2; i++ {
		if n := fmt.Sprintf("n%d", i); redisserver.KeySlot(prefix+"{"+n+"}") == slot {
			same = append(same, n)
		}
	}
	nameB, nameC := same[0], same[1]
	from, err := c.MasterForSlot(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	masters, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	to := masters[0]
	if to == from {
		to = masters[1]
	}
	a, err := l.TryAcquire(ctx, "A", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.TryAcquire(ctx, nameB, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		what string
		err  error
	}
	done := make(chan res, 8)
	var wg sync.WaitGroup
	run := func(what string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done <- res{what, f()}
		}()
	}
	err = c.Migrate(ctx, slot, to, redisserver.MigrateOptions{Midway: func(context.Context) error {
		base := prefix + "{" + nameC + "}"
		err := cc.Eval(ctx, "return 1", []string{base, base + ":tok", base + ":q", base + ":qd"}).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") && !strings.HasPrefix(err.Error(), "ASK ") {
			t.Errorf("control: a four-key EVAL midway: %v, want TRYAGAIN (or the ASK to the target that answers it)", err)
		} else {
			t.Logf("control: a four-key EVAL midway: %v", err)
		}
		if err := a.Renew(ctx); err != nil {
			t.Errorf("Renew midway: %v", err)
		}
		if cur, err := redislock.NewSequencer(cc, prefix).Current(ctx, "A"); err != nil || cur != a.Token() {
			t.Errorf("Current of the held lock midway: %d, %v; want %d", cur, err, a.Token())
		}
		run("TryAcquire of the held lock", func() error {
			_, err := l.TryAcquire(ctx, "A", time.Second)
			if !errors.Is(err, locks.ErrNotObtained) {
				return fmt.Errorf("%v, want ErrNotObtained", err)
			}
			return nil
		})
		run("Release, then TryAcquire", func() error {
			if err := b.Release(ctx); err != nil {
				return fmt.Errorf("release: %w", err)
			}
			le, err := l.TryAcquire(ctx, nameB, time.Second)
			if err != nil {
				return fmt.Errorf("TryAcquire after the release: %w", err)
			}
			return le.Release(ctx)
		})
		run("Acquire of a free lock", func() error {
			le, err := l.Acquire(ctx, nameC, time.Second)
			if err != nil {
				return err
			}
			return le.Release(ctx)
		})
		lat := harness.StartLateness(t)
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		wdeadline, _ := wctx.Deadline()
		_, werr := l.Acquire(wctx, "A", time.Second)
		if late := time.Since(wdeadline); !errors.Is(werr, context.DeadlineExceeded) || late > lat.Allowance(700*time.Millisecond, wdeadline) {
			t.Errorf("a waiter with a 300ms deadline midway: %v, %v past its deadline, want the deadline", werr, late)
		}
		time.Sleep(time.Second - time.Since(start))
		select {
		case r := <-done:
			t.Errorf("%s returned midway (%v): it should wait for the move", r.what, r.err)
		default:
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(done)
	for r := range done {
		if r.err != nil {
			t.Errorf("%s, called midway: %v", r.what, r.err)
		}
	}
	if err := a.Release(ctx); err != nil {
		t.Errorf("release after the move: %v", err)
	}
}
