package redlockbench_test

// Many keys on five Redis nodes: 64 workers over 10,000 keys (uniform and
// Zipf-skewed), fenceguard's redlock interleaved with redsync. Results:
// docs/benchmarks.md, "Many keys".

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/benchmarks/internal/lockbench"
	"github.com/fenceguard/fenceguard/benchmarks/internal/pgbench"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks/redislock/redlock"
	"github.com/fenceguard/fenceguard/token"
)

type work func(ctx context.Context, key int, t token.Token) error

func then(w work, key int, t token.Token) func(context.Context) error {
	if w == nil {
		return nil
	}
	return func(ctx context.Context) error { return w(ctx, key, t) }
}

// manyNodes returns clients of their own (pools big enough that no worker
// waits for a connection) on the five nodes, and the nodes' process ids.
func manyNodes(b *testing.B, dbs []*redisserver.DB) ([]*redis.Client, []int) {
	var cs []*redis.Client
	var pids []int
	for _, db := range dbs {
		c := redis.NewClient(&redis.Options{Addr: db.Addr, PoolSize: lockbench.Workers + 8, MinIdleConns: lockbench.Workers, DialerRetries: 1})
		b.Cleanup(func() { _ = c.Close() })
		cs = append(cs, c)
		if db.Server != nil {
			pids = append(pids, db.Server.PID())
		}
	}
	return cs, pids
}

func manyPeers(b *testing.B, dbs []*redisserver.DB, prefix string, fg, peer work) ([]lockbench.KeyPeer, []int) {
	const ttl = 10 * time.Second
	fgClients, pids := manyNodes(b, dbs)
	var nodes []redlock.Client
	for _, c := range fgClients {
		nodes = append(nodes, c)
	}
	l := newLocker(b, nodes, redlock.Options{Prefix: prefix + "fg:"})
	redsyncPeer := func(opts ...redsync.Option) lockbench.KeyAcquirer {
		cs, _ := manyNodes(b, dbs)
		var pools []rsredis.Pool
		for _, c := range cs {
			pools = append(pools, goredis.NewPool(c))
		}
		rs := redsync.New(pools...)
		opts = append(opts, redsync.WithExpiry(ttl), redsync.WithTries(math.MaxInt32))
		return func(ctx context.Context, key int) (func(context.Context) error, func(), error) {
			m := rs.NewMutex(prefix+"rs:"+lockbench.KeyName(key), opts...)
			if err := m.LockContext(ctx); err != nil {
				return nil, nil, err
			}
			return then(peer, key, 0), func() { _, _ = m.UnlockContext(ctx) }, nil
		}
	}
	return []lockbench.KeyPeer{
		{Name: "fenceguard", Acquirers: []lockbench.KeyAcquirer{func(ctx context.Context, key int) (func(context.Context) error, func(), error) {
			lease, err := l.Acquire(ctx, lockbench.KeyName(key), ttl)
			if err != nil {
				return nil, nil, err
			}
			return then(fg, key, lease.Token()), func() { _ = lease.Release(ctx) }, nil
		}}},
		{Name: "redsync-1ms", Acquirers: []lockbench.KeyAcquirer{redsyncPeer(redsync.WithRetryDelay(time.Millisecond))}},
		{Name: "redsync-default", Acquirers: []lockbench.KeyAcquirer{redsyncPeer()}},
	}, pids
}

// BenchmarkManyKeysPG: as redislock's (see there), on five nodes.
// -benchtime Nx sets the rounds (each peer runs 500ms per round).
func BenchmarkManyKeysPG(b *testing.B) {
	pool, pgPID := pgbench.Pool(b)
	dbs := redisserver.SharedN(b, 5)
	fgRows := pgbench.NewRows(b, pool, "items_fg")
	peerRows := pgbench.NewRows(b, pool, "items_peer")
	plain := func(ctx context.Context, key int, _ token.Token) error { return peerRows.Plain(ctx, key) }
	peers, pids := manyPeers(b, dbs, dbs[0].Prefix, fgRows.Fenced, plain)
	unfenced, _ := manyPeers(b, dbs, dbs[0].Prefix+"u:", plain, nil)
	unfenced[0].Name = "fenceguard-unfenced"
	ceiling := lockbench.KeyPeer{Name: "pg-only", Ceiling: true, Acquirers: []lockbench.KeyAcquirer{
		func(ctx context.Context, key int) (func(context.Context) error, func(), error) {
			return nil, nil, peerRows.Plain(ctx, key)
		}}}
	peers = append(peers, unfenced[0], ceiling)
	for _, d := range []lockbench.Dist{lockbench.Uniform, lockbench.Zipf} {
		b.Run(d.Name, func(b *testing.B) { lockbench.CompareManyKeys(b, peers, d, append(pids, pgPID)...) })
	}
}

// BenchmarkManyKeysLock: the same cycles with nothing in the critical
// section. (No ceiling here: redislock's benchmark measures one node's.)
func BenchmarkManyKeysLock(b *testing.B) {
	dbs := redisserver.SharedN(b, 5)
	peers, pids := manyPeers(b, dbs, dbs[0].Prefix, nil, nil)
	for _, d := range []lockbench.Dist{lockbench.Uniform, lockbench.Zipf} {
		b.Run(d.Name, func(b *testing.B) { lockbench.CompareManyKeys(b, peers, d, pids...) })
	}
}
