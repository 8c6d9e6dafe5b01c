package review19

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/internal/servers"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/token"
)

func clusterClient(t *testing.T, c *servers.RedisCluster) *redis.ClusterClient {
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

// The doc ("Redis Cluster", Hash tags): "Names may contain braces; the keys
// of one name still share a slot." A name that starts with '}' makes the
// tag of <prefix>{<name>} empty ("{}"), and Redis then hashes each whole
// key: the lock, its counter, queue and deadlines land in different slots,
// and every script of the lock fails with CROSSSLOT — on one node the same
// name works. (Liveness and a doc promise, not safety: nothing is granted.)
func TestDefectClusterNameStartingWithCloseBrace(t *testing.T) {
	defect(t, "redislock on Cluster: a lock name starting with '}' puts the lock's keys in different slots (empty hash tag): every acquire fails with CROSSSLOT")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := servers.NewRedisCluster(t, 3, 0)
	cc := clusterClient(t, c)
	l := newLocker(t, cc)
	for _, name := range []string{"a}b", "{x}", "}x", "}"} {
		base := redislock.DefaultPrefix + "{" + name + "}"
		slots := map[int]bool{}
		for _, k := range []string{base, base + ":tok", base + ":q", base + ":qd"} {
			slots[servers.KeySlot(k)] = true
		}
		le, err := l.TryAcquire(ctx, name, time.Second)
		if err != nil {
			t.Errorf("name %q (its keys span %d slots): TryAcquire: %v", name, len(slots), err)
			continue
		}
		if err := le.Release(ctx); err != nil {
			t.Errorf("name %q: Release: %v", name, err)
		}
	}
	// The Sequencer and the Fence with Replicas touch one key: fine.
	f := redislock.NewFence(cc, redislock.FenceOptions{Check: token.NoCheck()})
	if err := f.Claim(ctx, "}x", 5); err != nil {
		t.Errorf("Fence claim on resource %q: %v", "}x", err)
	}
}

// The doc ("Failover and resharding"): "resharding a lock's slot while it
// is held, queued for and released costs nothing but round trips." While a
// slot migrates, Redis serves a multi-key command on the importing node only
// when every key is there (else TRYAGAIN), and the lock's scripts name four
// keys of which the queue and its deadlines exist only while someone waits.
// Attack: hold a lock nobody waits for, and renew, try and release it while
// its slot is half-way to another master.
func TestDefectClusterLockDuringMigration(t *testing.T) {
	defect(t, "redislock on Cluster: while a lock's slot migrates, its multi-key scripts (acquire, release) fail with TRYAGAIN because the queue keys do not exist: no lock in the slot can be taken, waited for or released")
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	c := servers.NewRedisCluster(t, 2, 0)
	cc := clusterClient(t, c)
	l := newLocker(t, cc)
	const name = "migrating-lock"
	slot := servers.KeySlot(redislock.DefaultPrefix + "{" + name + "}")
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
	a, err := l.TryAcquire(ctx, name, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var errs []string
	var renewErr, tryErr error
	err = c.Migrate(ctx, slot, to, servers.MigrateOptions{Midway: func(ctx context.Context) error {
		renewErr = a.Renew(ctx)
		if renewErr != nil {
			errs = append(errs, "Renew: "+renewErr.Error())
		}
		_, tryErr = l.TryAcquire(ctx, name, time.Second)
		if tryErr != nil && !errors.Is(tryErr, locks.ErrNotObtained) {
			errs = append(errs, "TryAcquire of the held lock: "+tryErr.Error())
		}
		wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, werr := l.Acquire(wctx, name, time.Second)
		wcancel()
		if !errors.Is(werr, context.DeadlineExceeded) {
			errs = append(errs, fmt.Sprintf("Acquire (a waiter, 300ms) of the held lock: %v, want the deadline", werr))
		}
		if err := a.Release(ctx); err != nil {
			errs = append(errs, "Release: "+err.Error())
		}
		le, err := l.TryAcquire(ctx, name, time.Second)
		if err != nil {
			errs = append(errs, "TryAcquire of the released lock: "+err.Error())
		} else {
			_ = le.Release(ctx)
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mid-migration: Renew → %v; TryAcquire → %v", renewErr, tryErr)
	for _, e := range errs {
		t.Errorf("mid-migration of slot %d (%s → %s): %s", slot, from.Name(), to.Name(), e)
	}
}
