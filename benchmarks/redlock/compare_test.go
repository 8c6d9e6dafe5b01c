package redlockbench_test

// Side by side with go-redsync/redsync on the same five redis-server
// processes. Results: docs/benchmarks.md.

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/benchmarks/internal/lockbench"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks/redislock/redlock"
)

func benchNodes(b *testing.B) []*redis.Client {
	var cs []*redis.Client
	for _, db := range redisserver.SharedN(b, 5) {
		c := redis.NewClient(&redis.Options{Addr: db.Addr, PoolSize: 32, DialerRetries: 1})
		b.Cleanup(func() { _ = c.Close() })
		cs = append(cs, c)
	}
	return cs
}

func benchPeers(b *testing.B, cs []*redis.Client) map[string]func(key string) lockbench.Acquirer {
	const ttl = 10 * time.Second
	var nodes []redlock.Client
	var pools []rsredis.Pool
	for _, c := range cs {
		nodes = append(nodes, c)
		pools = append(pools, goredis.NewPool(c))
	}
	l := newLocker(b, nodes, redlock.Options{Prefix: "bench:"})
	rs := redsync.New(pools...)
	return map[string]func(string) lockbench.Acquirer{
		"fenceguard": func(key string) lockbench.Acquirer {
			return func(ctx context.Context) (func(), error) {
				lease, err := l.Acquire(ctx, key, ttl)
				if err != nil {
					return nil, err
				}
				return func() { _ = lease.Release(ctx) }, nil
			}
		},
		"redsync-default": func(key string) lockbench.Acquirer {
			return func(ctx context.Context) (func(), error) {
				m := rs.NewMutex("bench:redsync:"+key, redsync.WithExpiry(ttl), redsync.WithTries(math.MaxInt32))
				if err := m.LockContext(ctx); err != nil {
					return nil, err
				}
				return func() { _, _ = m.UnlockContext(ctx) }, nil
			}
		},
		"redsync-1ms": func(key string) lockbench.Acquirer {
			return func(ctx context.Context) (func(), error) {
				m := rs.NewMutex("bench:redsync:"+key, redsync.WithExpiry(ttl), redsync.WithTries(math.MaxInt32),
					redsync.WithRetryDelay(time.Millisecond))
				if err := m.LockContext(ctx); err != nil {
					return nil, err
				}
				return func() { _, _ = m.UnlockContext(ctx) }, nil
			}
		},
	}
}

// BenchmarkCompare runs the peers interleaved (see lockbench): one round is
// 100 uncontended cycles, or 200 critical sections by 8 goroutines on one
// key, per peer. -benchtime Nx sets the rounds.
func BenchmarkCompare(b *testing.B) {
	peers := benchPeers(b, benchNodes(b))
	mk := func(prefix string, names ...string) []lockbench.Peer {
		var out []lockbench.Peer
		for _, name := range names {
			a := peers[name](prefix + name)
			out = append(out, lockbench.Peer{Name: name, Acquirers: slices.Repeat([]lockbench.Acquirer{a}, 8)})
		}
		return out
	}
	b.Run("uncontended", func(b *testing.B) {
		lockbench.CompareUncontended(b, mk("u-", "fenceguard", "redsync-default"), 100)
	})
	b.Run("contended8", func(b *testing.B) {
		lockbench.CompareContended(b, mk("c-", "fenceguard", "redsync-default", "redsync-1ms"), 200*time.Microsecond, 200)
	})
}
