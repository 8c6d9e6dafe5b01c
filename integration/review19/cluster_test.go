package review19

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/internal/servers"
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
