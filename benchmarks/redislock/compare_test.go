package redislockbench_test

// Side-by-side benchmarks against bsm/redislock and go-redsync/redsync on
// the same redis-server, in the same run. Results and the command that
// reproduces them are in docs/benchmarks.md.

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/benchmarks/internal/lockbench"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks/redislock"
)

type peer struct {
	name string
	mk   func(b *testing.B, c *redis.Client, key string) lockbench.Acquirer
}

func peers() []peer {
	const ttl = 10 * time.Second
	return []peer{
		{"fenceguard", func(b *testing.B, c *redis.Client, key string) lockbench.Acquirer {
			l := newLocker(b, c, redislock.Options{Prefix: "bench:"})
			return func(ctx context.Context) (func(), error) {
				lease, err := l.Acquire(ctx, key, ttl)
				if err != nil {
					return nil, err
				}
				return func() { _ = lease.Release(ctx) }, nil
			}
		}},
		{"bsm-redislock", func(b *testing.B, c *redis.Client, key string) lockbench.Acquirer {
			// Blocking needs a retry strategy; 1ms linear is its tightest
			// sensible setting (it has no wake-up on release).
			l := bsm.New(c)
			opt := &bsm.Options{RetryStrategy: bsm.LinearBackoff(time.Millisecond)}
			return func(ctx context.Context) (func(), error) {
				lock, err := l.Obtain(ctx, "bench:"+key, ttl, opt)
				if err != nil {
					return nil, err
				}
				return func() { _ = lock.Release(ctx) }, nil
			}
		}},
		{"redsync-default", func(b *testing.B, c *redis.Client, key string) lockbench.Acquirer {
			// Default retry delay: random 50–250ms.
			rs := redsync.New(goredis.NewPool(c))
			return func(ctx context.Context) (func(), error) {
				m := rs.NewMutex("bench:"+key, redsync.WithExpiry(ttl), redsync.WithTries(math.MaxInt32))
				if err := m.LockContext(ctx); err != nil {
					return nil, err
				}
				return func() { _, _ = m.UnlockContext(ctx) }, nil
			}
		}},
		{"redsync-1ms", func(b *testing.B, c *redis.Client, key string) lockbench.Acquirer {
			rs := redsync.New(goredis.NewPool(c))
			return func(ctx context.Context) (func(), error) {
				m := rs.NewMutex("bench:"+key, redsync.WithExpiry(ttl), redsync.WithTries(math.MaxInt32),
					redsync.WithRetryDelay(time.Millisecond))
				if err := m.LockContext(ctx); err != nil {
					return nil, err
				}
				return func() { _, _ = m.UnlockContext(ctx) }, nil
			}
		}},
	}
}

func benchClient(b *testing.B) *redis.Client {
	db := redisserver.Shared(b)
	c := redis.NewClient(&redis.Options{Addr: db.Addr, PoolSize: 32})
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// BenchmarkCompare runs the peers interleaved (see lockbench): one round is
// 200 uncontended cycles, or 400 critical sections by 8 goroutines on one
// key, per peer. -benchtime Nx sets the rounds.
func BenchmarkCompare(b *testing.B) {
	c := benchClient(b)
	mk := func(names ...string) []lockbench.Peer {
		var out []lockbench.Peer
		for _, p := range peers() {
			if slices.Contains(names, p.name) {
				a := p.mk(b, c, "cmp-"+p.name)
				out = append(out, lockbench.Peer{Name: p.name, Acquirers: slices.Repeat([]lockbench.Acquirer{a}, 8)})
			}
		}
		return out
	}
	b.Run("uncontended", func(b *testing.B) {
		ping := lockbench.Peer{Name: "redis-ping", Acquirers: []lockbench.Acquirer{func(ctx context.Context) (func(), error) {
			return func() {}, c.Ping(ctx).Err()
		}}}
		lockbench.CompareUncontended(b, append(mk("fenceguard", "bsm-redislock", "redsync-default"), ping), 200)
	})
	b.Run("contended8", func(b *testing.B) {
		lockbench.CompareContended(b, mk("fenceguard", "bsm-redislock", "redsync-default", "redsync-1ms"), 200*time.Microsecond, 400)
	})
}
