package redislock_test

// Side-by-side benchmarks against bsm/redislock and go-redsync/redsync on
// the same redis-server, in the same run. Results and the command that
// reproduces them are in docs/benchmarks.md.

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/integration/servers"
	"github.com/fenceguard/fenceguard/locks/redislock"
)

// acquirer takes the lock and returns its release.
type acquirer func(ctx context.Context) (release func(), err error)

type peer struct {
	name string
	mk   func(b *testing.B, c *redis.Client, key string) acquirer
}

func peers() []peer {
	const ttl = 10 * time.Second
	return []peer{
		{"fenceguard", func(b *testing.B, c *redis.Client, key string) acquirer {
			l := newLocker(b, c, redislock.Options{Prefix: "bench:"})
			return func(ctx context.Context) (func(), error) {
				lease, err := l.Acquire(ctx, key, ttl)
				if err != nil {
					return nil, err
				}
				return func() { _ = lease.Release(ctx) }, nil
			}
		}},
		{"bsm-redislock", func(b *testing.B, c *redis.Client, key string) acquirer {
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
		{"redsync-default", func(b *testing.B, c *redis.Client, key string) acquirer {
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
		{"redsync-1ms", func(b *testing.B, c *redis.Client, key string) acquirer {
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
	db := servers.Redis(b)
	c := redis.NewClient(&redis.Options{Addr: db.Addr, PoolSize: 32})
	b.Cleanup(func() { _ = c.Close() })
	return c
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// One goroutine: acquire, release, again. Also the bare round trip.
func BenchmarkUncontended(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	b.Run("redis-ping", func(b *testing.B) {
		for b.Loop() {
			if err := c.Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, p := range peers() {
		if p.name == "redsync-1ms" {
			continue // same as redsync-default without contention
		}
		b.Run(p.name, func(b *testing.B) {
			acquire := p.mk(b, c, "uncontended-"+p.name)
			lat := make([]time.Duration, 0, 1<<16)
			for b.Loop() {
				t0 := time.Now()
				release, err := acquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				release()
				lat = append(lat, time.Since(t0))
			}
			b.ReportMetric(us(percentile(lat, 0.5)), "p50-µs")
			b.ReportMetric(us(percentile(lat, 0.99)), "p99-µs")
		})
	}
}

// Eight goroutines on one key, each critical section 200µs of busy work.
// Reports critical sections per second, the acquire wait's p99, fairness
// (Jain's index over per-goroutine counts; 1 is perfectly even) and the
// hand-off gap from a release call to the next acquire's return.
func BenchmarkContended8(b *testing.B) {
	c := benchClient(b)
	for _, p := range peers() {
		b.Run(p.name, func(b *testing.B) {
			acquire := p.mk(b, c, "contended-"+p.name)
			benchContended(b, acquire, 8, 200*time.Microsecond)
		})
	}
}

func busy(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}

func benchContended(b *testing.B, acquire acquirer, workers int, cs time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var (
		taken       atomic.Int64
		lastRelease atomic.Int64 // unix ns of the last release call
		failures    atomic.Int64
		wg          sync.WaitGroup
		counts      = make([]int, workers)
		waits       = make([][]time.Duration, workers)
		gaps        = make([][]time.Duration, workers)
	)
	total := int64(b.N)
	b.ResetTimer()
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for taken.Load() < total {
				t0 := time.Now()
				release, err := acquire(ctx)
				t1 := time.Now()
				if err != nil {
					if ctx.Err() != nil || !errors.Is(err, bsm.ErrNotObtained) {
						failures.Add(1)
					}
					continue
				}
				if taken.Add(1) > total {
					release()
					return
				}
				waits[w] = append(waits[w], t1.Sub(t0))
				if lr := lastRelease.Load(); lr != 0 {
					gaps[w] = append(gaps[w], t1.Sub(time.Unix(0, lr)))
				}
				busy(cs)
				counts[w]++
				lastRelease.Store(time.Now().UnixNano())
				release()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if n := failures.Load(); n > 0 {
		b.Logf("%d acquire attempts failed", n)
	}
	var sum, sumSq float64
	for _, n := range counts {
		sum += float64(n)
		sumSq += float64(n) * float64(n)
	}
	jain := 1.0
	if sumSq > 0 {
		jain = sum * sum / (float64(workers) * sumSq)
	}
	all := slices.Concat(waits...)
	g := slices.Concat(gaps...)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "cs/s")
	b.ReportMetric(float64(percentile(all, 0.99))/float64(time.Millisecond), "wait-p99-ms")
	b.ReportMetric(jain, "jain")
	b.ReportMetric(us(percentile(g, 0.5)), "gap-p50-µs")
	b.ReportMetric(us(percentile(g, 0.99)), "gap-p99-µs")
}
