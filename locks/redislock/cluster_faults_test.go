package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/token"
)

// grantRec is one grant a holder got.
type grantRec struct {
	holder   int
	tok      token.Token
	got, rel time.Time // Acquire returned; the holder stopped using it (before Release)
}

// holders runs n holders of one lock, each with a ClusterClient and a
// Locker of its own (n processes), each taking the lock, holding it for
// hold, releasing it, until stop is closed. With strict, a grant while
// another holder is inside fails the test (the in-test exclusion checker).
type holders struct {
	mu     sync.Mutex
	grants []grantRec
	errs   []error
	inside atomic.Int64 // holder id + 1 while one holds the lock
	wg     sync.WaitGroup
}

func runHolders(t *testing.T, c *redisserver.Cluster, prefix, key string, n int, ttl, hold time.Duration, strict bool, stop <-chan struct{}) *holders {
	h := &holders{}
	for i := range n {
		l := newLocker(t, newClusterClient(t, c, nil), redislock.Options{Prefix: prefix})
		h.wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				lease, err := l.Acquire(ctx, key, ttl)
				if err != nil {
					cancel()
					h.mu.Lock()
					h.errs = append(h.errs, fmt.Errorf("holder %d: %w", i, err))
					h.mu.Unlock()
					time.Sleep(20 * time.Millisecond)
					continue
				}
				g := grantRec{holder: i, tok: lease.Token(), got: time.Now()}
				if strict && !h.inside.CompareAndSwap(0, int64(i)+1) {
					t.Errorf("holder %d granted token %d while holder %d holds the lock", i, g.tok, h.inside.Load()-1)
				}
				time.Sleep(hold)
				g.rel = time.Now()
				if strict {
					h.inside.CompareAndSwap(int64(i)+1, 0)
				}
				err = lease.Release(ctx)
				cancel()
				h.mu.Lock()
				h.grants = append(h.grants, g)
				if err != nil {
					h.errs = append(h.errs, fmt.Errorf("holder %d: release of %d: %w", i, g.tok, err))
				}
				h.mu.Unlock()
			}
		})
	}
	return h
}

func (h *holders) wait() ([]grantRec, []error) {
	h.wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.grants, h.errs
}

func (h *holders) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.grants)
}

// checkTokensGrow fails when a grant taken after another grant ended has a
// token no larger than that one's.
func checkTokensGrow(t *testing.T, grants []grantRec) {
	t.Helper()
	bad := 0
	for _, a := range grants {
		for _, b := range grants {
			if b.got.After(a.rel) && b.tok <= a.tok {
				if bad++; bad <= 5 {
					t.Errorf("holder %d got token %d after holder %d had held %d until %v", b.holder, b.tok, a.holder, a.tok, a.rel.Format(time.StampMicro))
				}
			}
		}
	}
}

// waitGrants waits until the holders made n more grants.
func waitGrants(t *testing.T, h *holders, n int, what string) {
	t.Helper()
	want := h.count() + n
	deadline := time.Now().Add(30 * time.Second)
	for h.count() < want {
		if time.Now().After(deadline) {
			h.mu.Lock()
			errs := h.errs[max(0, len(h.errs)-8):]
			h.mu.Unlock()
			t.Fatalf("%s: %d grants in 30s, want %d more; last errors: %v", what, h.count(), n, errs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Holders keep taking one lock while its master is killed (the cluster
// promotes the replica), comes back as a replica, and a CLUSTER FAILOVER
// hands the slot back: every grant's token is above the token of every
// grant that ended before it, across both failovers.
func TestClusterFailoverTokensGrow(t *testing.T) {
	t.Parallel() // mostly waiting for cluster-node-timeout and elections
	c := redisserver.NewCluster(t, 3, 1)
	ctx := ctxFor(t, 2*time.Minute)
	prefix, key := clusterPrefix(), "L"
	stop := make(chan struct{})
	h := runHolders(t, c, prefix, key, 4, 2*time.Second, 2*time.Millisecond, false, stop)
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
			h.wait()
		}
	}()
	waitGrants(t, h, 50, "before the failovers")
	m, err := c.MasterForKey(ctx, prefix+"{"+key+"}")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r, err := c.KillFailover(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s killed, %s promoted in %v", m.Name(), r.Name(), time.Since(start))
	waitGrants(t, h, 50, "after the kill")
	if err := m.Start(false); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if back, err := c.Failover(ctx, r); err != nil || back != m {
		t.Fatalf("failover back to %s: %v, %v", m.Name(), back, err)
	}
	t.Logf("CLUSTER FAILOVER back to %s in %v", m.Name(), time.Since(start))
	waitGrants(t, h, 50, "after the failover back")
	close(stop)
	grants, errs := h.wait()
	t.Logf("%d grants, %d failed calls (during the failovers)", len(grants), len(errs))
	for i, err := range errs {
		if i < 3 {
			t.Logf("e.g. %v", err)
		}
	}
	checkTokensGrow(t, grants)
}

// Holders keep taking one lock while its slot is moved to another master
// and back — each move paused midway so that their calls are redirected
// with ASK (or refused with TRYAGAIN, which the calls wait out), and sent
// MOVED after it: no call fails, the in-test checker sees one holder at a
// time, and tokens grow.
func TestClusterReshardWhileLocking(t *testing.T) {
	t.Parallel()
	c := redisserver.NewCluster(t, 3, 1)
	ctx := ctxFor(t, 2*time.Minute)
	prefix, key := clusterPrefix(), "L"
	slot := redisserver.KeySlot(prefix + "{" + key + "}")
	stop := make(chan struct{})
	h := runHolders(t, c, prefix, key, 4, 5*time.Second, 2*time.Millisecond, true, stop)
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
			h.wait()
		}
	}()
	waitGrants(t, h, 30, "before the move")
	home, err := c.MasterForSlot(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	ms, _ := c.Masters(ctx)
	var to *harness.Server
	for _, m := range ms {
		if m != home {
			to = m
		}
	}
	// Midway, grants go on while every key of the lock is on the source;
	// once one is missing there (a release deleted the lock, the queue
	// emptied), Redis refuses the scripts with TRYAGAIN until the move is
	// done, and the calls wait for it (the doc's promise). So midway lasts
	// until 30 grants or until grants stop (the calls now wait for the
	// move), never for a fixed time the waiting calls would have to sit
	// out: they must still succeed after the move, within their 5 s.
	midway := func(ctx context.Context) error {
		before := h.count()
		last, lastAt := before, time.Now()
		err := harness.WaitFor(ctx, 10*time.Millisecond, func(context.Context) error {
			switch n := h.count(); {
			case n >= before+30:
				return nil
			case n != last:
				last, lastAt = n, time.Now()
			case time.Since(lastAt) > 200*time.Millisecond:
				return nil
			}
			return errors.New("grants still going on")
		})
		t.Logf("midway: %d grants", h.count()-before)
		return err
	}
	for _, dst := range []*harness.Server{to, home} {
		before := h.count()
		if err := c.Migrate(ctx, slot, dst, redisserver.MigrateOptions{Midway: midway}); err != nil {
			t.Fatal(err)
		}
		waitGrants(t, h, 30, "after the move")
		t.Logf("slot %d moved to %s: %d grants during and right after the move", slot, dst.Name(), h.count()-before)
	}
	close(stop)
	grants, errs := h.wait()
	for _, err := range errs {
		t.Errorf("a call failed while the slot moved: %v", err)
	}
	t.Logf("%d grants", len(grants))
	checkTokensGrow(t, grants)
}

// The double grant Redis's asynchronous replication allows: the lock is
// granted on the master, the master dies before the write reaches its
// replica (its replication link is blackholed), the replica is promoted
// without the lock, and a second holder gets it. Both hold leases at once.
// A fenced resource (a MemoryFence, and the Redis Fence on another master)
// refuses the stale holder's write after the new holder's; the same
// resource unfenced accepts both.
func TestClusterDoubleGrantAcrossFailover(t *testing.T) {
	t.Parallel() // mostly waiting for cluster-node-timeout and elections
	c := redisserver.NewClusterWith(t, redisserver.ClusterOptions{Masters: 3, ReplicasPerMaster: 1, Links: true})
	ctx := ctxFor(t, 2*time.Minute)
	prefix, key := clusterPrefix(), "L"
	lockKey := prefix + "{" + key + "}"
	m, err := c.MasterForKey(ctx, lockKey)
	if err != nil {
		t.Fatal(err)
	}
	reps, err := c.Replicas(ctx, m)
	if err != nil || len(reps) != 1 {
		t.Fatalf("replicas of %s: %v, %v", m.Name(), reps, err)
	}
	r := reps[0]
	// The Redis Fence keeps its mark on a third master.
	ms, _ := c.Masters(ctx)
	var resource string
	for i := 0; resource == ""; i++ {
		name := fmt.Sprintf("res-%d", i)
		if o, _ := c.MasterForKey(ctx, prefix+"fence:{"+name+"}"); o != m && o != r {
			resource = name
		}
	}
	_ = ms
	l1 := newLocker(t, newClusterClient(t, c, nil), redislock.Options{Prefix: prefix})
	l2 := newLocker(t, newClusterClient(t, c, nil), redislock.Options{Prefix: prefix})
	// Warm up: the counter exists on both.
	if lease, err := l1.Acquire(ctx, key, time.Second); err != nil {
		t.Fatal(err)
	} else if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}

	// The grant reaches the master only.
	if err := c.Link(m).Blackhole(); err != nil {
		t.Fatal(err)
	}
	lease1, err := l1.Acquire(ctx, key, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	onReplica := redis.NewClient(&redis.Options{Addr: r.Addr(), OnConnect: func(ctx context.Context, cn *redis.Conn) error { return cn.ReadOnly(ctx).Err() }})
	defer onReplica.Close()
	if v, err := onReplica.Get(ctx, lockKey).Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("the replica has the lock key: %q, %v", v, err)
	}
	if _, err := c.KillFailover(ctx, m); err != nil {
		t.Fatal(err)
	}
	lease2, err := l2.Acquire(ctx, key, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if !lease1.Deadline().After(now) || !lease2.Deadline().After(now) {
		t.Fatalf("leases end at %v and %v, now %v: want both held", lease1.Deadline(), lease2.Deadline(), now)
	}
	t.Logf("two holders at once: token %d (granted on %s, lost with it) and %d (granted on the promoted %s)", lease1.Token(), m.Name(), lease2.Token(), r.Name())
	if lease2.Token() <= lease1.Token() {
		t.Fatalf("the second grant's token %d is not above the lost grant's %d", lease2.Token(), lease1.Token())
	}

	// Unfenced: the resource takes both writes.
	var unfenced []token.Token
	write := func(tok token.Token) { unfenced = append(unfenced, tok) }
	write(lease2.Token())
	write(lease1.Token())
	if len(unfenced) != 2 {
		t.Fatal("control: unfenced resource refused a write")
	}
	t.Logf("control: the unfenced resource accepted writes from both holders: %v", unfenced)

	// Fenced: the stale holder's write after the new holder's is refused.
	mem := &token.MemoryFence{}
	rf := redislock.NewFence(newClusterClient(t, c, nil), redislock.FenceOptions{Prefix: prefix + "fence:", Logger: discard})
	for name, f := range map[string]token.Fence{"MemoryFence": mem, "Redis Fence": rf} {
		if err := f.Claim(ctx, resource, lease2.Token()); err != nil {
			t.Fatalf("%s: the new holder's claim: %v", name, err)
		}
		err := f.Claim(ctx, resource, lease1.Token())
		if !errors.Is(err, token.ErrStale) {
			t.Fatalf("%s: the stale holder's claim: %v, want ErrStale", name, err)
		}
		t.Logf("%s refused the stale holder: %v", name, err)
	}
	// The stale holder finds out when it renews.
	if err := lease1.Renew(ctx); err == nil {
		t.Fatal("the lost grant renewed")
	} else {
		t.Logf("the stale holder's renew: %v", err)
	}
	if err := lease2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
