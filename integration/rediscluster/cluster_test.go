package rediscluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/token"
)

func clusterClient(t *testing.T, c *redisserver.Cluster) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:       c.Addrs(),
		MaxRetries:  -1,
		DialTimeout: time.Second,
		ReadTimeout: 2 * time.Second,
	})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// TestClusterNameStartingWithCloseBraceRefused: a name that starts with '}'
// makes the tag of <prefix>{<name>} empty ("{}"), so Redis hashes each whole
// key and the lock's keys would land in different slots (CROSSSLOT). On a
// Cluster client the Locker and the Sequencer refuse such names at once with
// locks.ErrInvalidArgument, never CROSSSLOT, as the doc says ("Names may contain
// braces, with one exception"); names with other braces work, and on one
// node '}'-names work too. The Fence, which touches one key, takes them.
func TestClusterNameStartingWithCloseBraceRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := redisserver.NewCluster(t, 3, 0)
	cc := clusterClient(t, c)
	l := newLocker(t, cc, redislock.Options{})
	for _, name := range []string{"a}b", "{x}", "}x", "}"} {
		base := redislock.DefaultPrefix + "{" + name + "}"
		slots := map[int]bool{}
		for _, k := range []string{base, base + ":tok", base + ":q", base + ":qd"} {
			slots[redisserver.KeySlot(k)] = true
		}
		le, err := l.TryAcquire(ctx, name, time.Second)
		if len(slots) > 1 {
			if !errors.Is(err, locks.ErrInvalidArgument) {
				t.Errorf("name %q (its keys span %d slots): TryAcquire: %v, want ErrInvalid", name, len(slots), err)
			}
			if _, err := redislock.NewSequencer(cc, "").Current(ctx, name); !errors.Is(err, locks.ErrInvalidArgument) {
				t.Errorf("name %q: Sequencer.Current: %v, want ErrInvalid", name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("name %q (one slot): TryAcquire: %v", name, err)
			continue
		}
		if err := le.Release(ctx); err != nil {
			t.Errorf("name %q: Release: %v", name, err)
		}
	}
	// On one node the same names work.
	single := redisserver.Shared(t)
	sc := redis.NewClient(&redis.Options{Addr: single.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = sc.Close() })
	ls, err := redislock.New(sc, redislock.Options{Prefix: single.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	for _, name := range []string{"}x", "}"} {
		le, err := ls.TryAcquire(ctx, name, time.Second)
		if err != nil {
			t.Errorf("single node: name %q: TryAcquire: %v", name, err)
			continue
		}
		_ = le.Release(ctx)
	}
	// The Fence touches one key: fine.
	f := redislock.NewFence(cc, redislock.FenceOptions{Check: token.NoCheck()})
	if err := f.Claim(ctx, "}x", 5); err != nil {
		t.Errorf("Fence claim on resource %q: %v", "}x", err)
	}
}

// TestClusterLockUsableThroughMigration: while a held lock's slot is halfway
// to another master (Redis serves a multi-key command on the importing node
// only when every key is there, else TRYAGAIN), Renew (one key) succeeds, a
// waiter's Acquire ends by its deadline, and the calls started midway —
// TryAcquire of the held lock, Release, Sequencer.Current, TryAcquire of the
// freed lock — wait for the move (the doc: "costs waiting for the move and
// round trips") and succeed once it is done. Midway holds the slot there
// for a second, longer than go-redis's own retries.
func TestClusterLockUsableThroughMigration(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	c := redisserver.NewCluster(t, 2, 0)
	cc := clusterClient(t, c)
	l := newLocker(t, cc, redislock.Options{})
	const name = "migrating-lock"
	slot := redisserver.KeySlot(redislock.DefaultPrefix + "{" + name + "}")
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
	// The TTL outlasts the test however slowly a busy machine migrates:
	// the lock must still be held when the calls made midway run.
	a, err := l.TryAcquire(ctx, name, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var errs []string
	var mu sync.Mutex
	fail := func(s string) {
		mu.Lock()
		errs = append(errs, s)
		mu.Unlock()
	}
	var renewErr, tryErr error
	finished := make(chan time.Time, 1)
	err = c.Migrate(ctx, slot, to, redisserver.MigrateOptions{Midway: func(ctx context.Context) error {
		renewErr = a.Renew(ctx)
		if renewErr != nil {
			fail("Renew: " + renewErr.Error())
		}
		wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, werr := l.Acquire(wctx, name, time.Second)
		wcancel()
		if !errors.Is(werr, context.DeadlineExceeded) {
			fail(fmt.Sprintf("Acquire (a waiter, 300ms) of the held lock: %v, want the deadline", werr))
		}
		go func() {
			defer func() { finished <- time.Now() }()
			_, tryErr = l.TryAcquire(ctx, name, time.Second)
			if tryErr != nil && !errors.Is(tryErr, locks.ErrNotObtained) {
				fail("TryAcquire of the held lock: " + tryErr.Error())
			}
			if err := a.Release(ctx); err != nil {
				fail("Release: " + err.Error())
			}
			if _, err := redislock.NewSequencer(cc, "").Current(ctx, name); err != nil {
				fail("Sequencer.Current of the released lock: " + err.Error())
			}
			le, err := l.TryAcquire(ctx, name, time.Second)
			if err != nil {
				fail("TryAcquire of the released lock: " + err.Error())
			} else {
				_ = le.Release(ctx)
			}
		}()
		time.Sleep(time.Second)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	moved := time.Now()
	select {
	case at := <-finished:
		t.Logf("mid-migration: Renew → %v; the calls made midway finished %v after the move", renewErr, at.Sub(moved).Round(time.Millisecond))
	case <-ctx.Done():
		t.Fatal("the calls made midway did not finish")
	}
	t.Logf("TryAcquire of the held lock → %v", tryErr)
	for _, e := range errs {
		t.Errorf("mid-migration of slot %d (%s → %s): %s", slot, from.Name(), to.Name(), e)
	}
}

// TestClusterHealedTokenGrowsAcrossFailover: the counter healed above the
// clock (as Heal's doc says to, after a StaleError), a grant replicated
// nowhere (the master's replication link blackholed), the master killed and
// its replica promoted. With the heal offset (tokens max(counter + 1,
// clock + d)) the second grant's token is larger than the lost one, and the
// redislock Fence (with Replicas, on another master) refuses the first
// holder once the second wrote. Control, in the same failover: a second lock
// on the same master healed without the offset repeats the token, and the
// Fence admits both of its holders.
func TestClusterHealedTokenGrowsAcrossFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := redisserver.NewClusterWith(t, redisserver.ClusterOptions{Masters: 3, ReplicasPerMaster: 1, Links: true})
	newClient := func() *redis.ClusterClient {
		cc := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: c.Addrs(), Dialer: c.Dialer(), MaxRetries: -1,
			DialTimeout: time.Second, ReadTimeout: 2 * time.Second,
		})
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	ca := newClient()
	la := newLocker(t, ca, redislock.Options{})
	const name = "healed"
	lockKey := redislock.DefaultPrefix + "{" + name + "}"
	m, err := c.MasterForKey(ctx, lockKey)
	if err != nil {
		t.Fatal(err)
	}
	// The control lock, on the same master.
	legacy := ""
	for i := 0; ; i++ {
		legacy = fmt.Sprintf("legacy%d", i)
		if lm, err := c.MasterForKey(ctx, redislock.DefaultPrefix+"{"+legacy+"}"); err == nil && lm == m {
			break
		}
	}
	// The resources' marks on other masters, acknowledged by their replicas.
	var resources []string
	for i := 0; len(resources) < 2; i++ {
		res := fmt.Sprintf("res%d", i)
		if fm, err := c.MasterForKey(ctx, "fenceguard:fence:{"+res+"}"); err == nil && fm != m {
			resources = append(resources, res)
		}
	}
	res, resL := resources[0], resources[1]
	fence := redislock.NewFence(ca, redislock.FenceOptions{Replicas: 1})
	forged := token.Token(time.Now().Add(time.Minute).UnixMicro())
	for _, r := range resources {
		if err := fence.Claim(ctx, r, forged); err != nil {
			t.Fatalf("a forged claim within the skew: %v", err)
		}
	}
	var se *token.StaleError
	for i, n := range []string{name, legacy} {
		h0, err := la.TryAcquire(ctx, n, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := fence.Claim(ctx, resources[i], h0.Token()); !errors.As(err, &se) {
			t.Fatalf("honest claim: %v, want StaleError", err)
		}
		if _, err := la.Heal(ctx, n, se.Current); err != nil {
			t.Fatal(err)
		}
		if err := h0.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Strip the offset from the counter's key ("counter:offset").
	lk := redislock.DefaultPrefix + "{" + legacy + "}:tok"
	lv, _, _ := strings.Cut(ca.Get(ctx, lk).Val(), ":")
	if err := ca.Set(ctx, lk, lv, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil { // replicas synced
		t.Fatal(err)
	}
	if err := c.Link(m).Blackhole(); err != nil {
		t.Fatal(err)
	}
	a, err := la.TryAcquire(ctx, name, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Claim(ctx, res, a.Token()); err != nil {
		t.Fatalf("A's claim: %v", err)
	}
	aL, err := la.TryAcquire(ctx, legacy, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Claim(ctx, resL, aL.Token()); err != nil {
		t.Fatalf("A's claim (control): %v", err)
	}
	if _, err := c.KillFailover(ctx, m); err != nil {
		t.Fatal(err)
	}
	lb := newLocker(t, newClient(), redislock.Options{})
	b := acquireRetry(ctx, t, lb, name, 20*time.Second)
	bL := acquireRetry(ctx, t, lb, legacy, 20*time.Second)
	defer func() {
		_ = b.Release(ctx)
		_ = bL.Release(ctx)
	}()
	t.Logf("lost grant's token %d, the grant after the failover %d", a.Token(), b.Token())
	t.Logf("control (healed without offset): lost grant's token %d, the grant after the failover %d", aL.Token(), bL.Token())
	if b.Token() <= a.Token() {
		t.Errorf("the grant after the failover got token %d, not above the lost grant's %d", b.Token(), a.Token())
	}
	if err := fence.Claim(ctx, res, b.Token()); err != nil {
		t.Errorf("B's claim: %v", err)
	}
	if err := fence.Claim(ctx, res, a.Token()); err == nil {
		t.Errorf("the Fence (Replicas 1) admitted the stale holder A (token %d) after B (token %d) had claimed: two holders admitted", a.Token(), b.Token())
	}
	// The control.
	if bL.Token() != aL.Token() {
		t.Errorf("control: without the offset the token changed (%d → %d); the control no longer shows the repeat", aL.Token(), bL.Token())
	}
	if err := fence.Claim(ctx, resL, bL.Token()); err != nil {
		t.Errorf("control: B's claim: %v", err)
	}
	if err := fence.Claim(ctx, resL, aL.Token()); err != nil {
		t.Errorf("control: A's claim after B's was refused (%v); the control no longer shows both admitted", err)
	}
}

// TestClusterFenceReplicasAcrossKillFailover: FenceOptions.Replicas on a
// Cluster. A claim made while the mark's master cannot replicate (its link
// blackholed) is refused with a ReplicaError, and the claim acknowledged
// before it survives the master's kill-failover: a lower token is refused
// after. Control, in the same failover: a Fence without Replicas
// acknowledges the claim the failover then loses, and a lower token is
// admitted after the higher one was acknowledged. Also checked: a claim with
// Replicas while the mark's slot is mid-migration (ASK) is acknowledged and
// is the mark after the move.
func TestClusterFenceReplicasAcrossKillFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := redisserver.NewClusterWith(t, redisserver.ClusterOptions{Masters: 3, ReplicasPerMaster: 1, Links: true})
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: c.Addrs(), Dialer: c.Dialer(), MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second,
	})
	t.Cleanup(func() { _ = cc.Close() })
	safe := redislock.NewFence(cc, redislock.FenceOptions{Replicas: 1, Check: token.NoCheck(), ReplicaTimeout: 300 * time.Millisecond})
	unsafe := redislock.NewFence(cc, redislock.FenceOptions{Check: token.NoCheck()})
	key := func(r string) string { return "fenceguard:fence:{" + r + "}" }
	// Two resources on one master.
	m, err := c.MasterForKey(ctx, key("r-safe"))
	if err != nil {
		t.Fatal(err)
	}
	other := ""
	for i := 0; other == ""; i++ {
		r := fmt.Sprintf("r-unsafe%d", i)
		if mm, _ := c.MasterForKey(ctx, key(r)); mm == m {
			other = r
		}
	}
	if err := safe.Claim(ctx, "r-safe", 100); err != nil {
		t.Fatalf("acknowledged claim: %v", err)
	}
	if err := unsafe.Claim(ctx, other, 100); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Link(m).Blackhole(); err != nil {
		t.Fatal(err)
	}
	err = safe.Claim(ctx, "r-safe", 200)
	if !errors.Is(err, redislock.ErrNotReplicated) {
		t.Errorf("claim with the replica cut off: %v, want ErrNotReplicated", err)
	}
	if err := unsafe.Claim(ctx, other, 200); err != nil {
		t.Fatalf("control: claim without Replicas: %v", err)
	}
	if _, err := c.KillFailover(ctx, m); err != nil {
		t.Fatal(err)
	}
	claim := func(f *redislock.Fence, r string, tk token.Token) error {
		var err error
		for range 20 { // network errors while the client learns the new master
			if err = f.Claim(ctx, r, tk); err == nil || errors.As(err, new(*token.StaleError)) {
				return err
			}
			time.Sleep(100 * time.Millisecond)
		}
		return err
	}
	if err := claim(safe, "r-safe", 50); !errors.As(err, new(*token.StaleError)) {
		t.Errorf("token 50 after the failover: %v, want StaleError (the acknowledged 100 survived)", err)
	}
	if err := claim(unsafe, other, 150); err == nil {
		t.Logf("control: without Replicas, token 150 admitted after 200 was acknowledged (the failover lost it)")
	} else {
		t.Errorf("control: without Replicas, token 150 after the failover: %v; the control no longer loses the acknowledged 200", err)
	}

	// A claim while the mark's slot moves (ASK to the target).
	slot := redisserver.KeySlot(key("r-move"))
	if err := safe.Claim(ctx, "r-move", 10); err != nil {
		t.Fatal(err)
	}
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
	var mid error
	if err := c.Migrate(ctx, slot, to, redisserver.MigrateOptions{Midway: func(context.Context) error {
		mid = safe.Claim(ctx, "r-move", 20)
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	if mid != nil {
		t.Errorf("claim with Replicas mid-migration: %v", mid)
	}
	if err := safe.Claim(ctx, "r-move", 15); !errors.As(err, new(*token.StaleError)) {
		t.Errorf("token 15 after the migration: %v, want StaleError", err)
	}
}

// TestClusterWakeUpsFromEveryMaster: the Locker's one subscription hears the
// releases of locks on every master (classic pub/sub crosses the bus). With
// TTL and WaiterTTL of 30 s a waiter that missed the release would sleep
// ~10 s (its refresh); each hand-over here must wake it within a second.
func TestClusterWakeUpsFromEveryMaster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	c := redisserver.NewCluster(t, 3, 0)
	cc := clusterClient(t, c)
	holder := newLocker(t, cc, redislock.Options{})
	waiterL, err := redislock.New(clusterClient(t, c), redislock.Options{WaiterTTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer waiterL.Close()
	masters, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range masters {
		name := ""
		for i := 0; name == ""; i++ {
			n := fmt.Sprintf("wake%d", i)
			if mm, _ := c.MasterForKey(ctx, redislock.DefaultPrefix+"{"+n+"}"); mm == m {
				name = n
			}
		}
		a, err := holder.TryAcquire(ctx, name, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan time.Time, 1)
		go func() {
			le, err := waiterL.Acquire(ctx, name, 30*time.Second)
			if err != nil {
				t.Errorf("waiter on %s: %v", name, err)
				got <- time.Time{}
				return
			}
			got <- time.Now()
			_ = le.Release(context.Background())
		}()
		time.Sleep(300 * time.Millisecond) // queued
		released := time.Now()
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		at := <-got
		if at.IsZero() {
			continue
		}
		d := at.Sub(released)
		t.Logf("lock on %s: waiter woke %v after the release", m.Name(), d.Round(time.Millisecond))
		if d > time.Second {
			t.Errorf("lock %q on %s: the waiter woke %v after the release (missed the wake-up)", name, m.Name(), d)
		}
	}
}
