package redislockbench_test

// Many keys on a Redis Cluster of three masters against one node, lock
// only, in the same rounds. Results: docs/benchmarks.md, "Many keys".

import (
	"context"
	"testing"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/benchmarks/internal/lockbench"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks/redislock"
)

// BenchmarkManyKeysCluster: fenceguard's redislock and bsm/redislock, each
// on a ClusterClient over three masters (no replicas) and on a plain client
// of one node of its own, 64 workers over 10,000 keys. -benchtime Nx sets
// the rounds (each peer runs 500ms per round).
func BenchmarkManyKeysCluster(b *testing.B) {
	const ttl = 10 * time.Second
	cl := redisserver.NewCluster(b, 3, 0)
	one := redisserver.New(b)
	var pids []int
	for _, s := range append(cl.Nodes, one) {
		pids = append(pids, s.PID())
	}
	clusterClient := func() *redis.ClusterClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), PoolSize: lockbench.Workers + 8,
			MinIdleConns: lockbench.Workers, MaxRedirects: 8})
		b.Cleanup(func() { _ = c.Close() })
		if err := c.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }); err != nil {
			b.Fatal(err)
		}
		return c
	}
	fg := func(name string, c redislock.Client) lockbench.KeyPeer {
		l := newLocker(b, c, redislock.Options{Prefix: "mk:" + name + ":"})
		return lockbench.KeyPeer{Name: name, Acquirers: []lockbench.KeyAcquirer{func(ctx context.Context, key int) (func(context.Context) error, func(), error) {
			lease, err := l.Acquire(ctx, lockbench.KeyName(key), ttl)
			if err != nil {
				return nil, nil, err
			}
			return nil, func() { _ = lease.Release(ctx) }, nil
		}}}
	}
	bsmPeer := func(name string, c redis.UniversalClient) lockbench.KeyPeer {
		l := bsm.New(c)
		opt := &bsm.Options{RetryStrategy: bsm.LinearBackoff(time.Millisecond)}
		return lockbench.KeyPeer{Name: name, Acquirers: []lockbench.KeyAcquirer{func(ctx context.Context, key int) (func(context.Context) error, func(), error) {
			lock, err := l.Obtain(ctx, "mk:"+name+":"+lockbench.KeyName(key), ttl, opt)
			if err != nil {
				return nil, nil, err
			}
			return nil, func() { _ = lock.Release(ctx) }, nil
		}}}
	}
	peers := []lockbench.KeyPeer{
		fg("fenceguard-cluster3", clusterClient()),
		fg("fenceguard-1node", manyClient(b, one.Addr())),
		bsmPeer("bsm-cluster3", clusterClient()),
		bsmPeer("bsm-1node", manyClient(b, one.Addr())),
	}
	for _, d := range []lockbench.Dist{lockbench.Uniform, lockbench.Zipf} {
		b.Run(d.Name, func(b *testing.B) { lockbench.CompareManyKeys(b, peers, d, pids...) })
	}
}
