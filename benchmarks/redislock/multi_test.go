package redislockbench_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/benchmarks/internal/lockbench"
	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock"
)

// oneByOne hides the locker's TryAcquireAll, so package guard takes a set's
// keys one by one.
type oneByOne struct{ locks.Locker }

// multiPeers are the ways to hold n keys at once: package guard trying
// them in one script (the default), guard taking them one by one, the
// locker's TryAcquireAll alone (no guard: no keep-alive, releases sent
// together), and bsm/redislock's ObtainMulti.
func multiPeers(b *testing.B, c *redis.Client, n int) []lockbench.Peer {
	const ttl = 10 * time.Second
	keys := func(peer string) []string {
		ks := make([]string, n)
		for i := range ks {
			ks[i] = fmt.Sprintf("multi-%s-%d", peer, i)
		}
		return ks
	}
	viaGuard := func(name string, l locks.Locker) lockbench.Peer {
		g, err := guard.New(l, guard.Options{TTL: ttl})
		if err != nil {
			b.Fatal(err)
		}
		ks := keys(name)
		return lockbench.Peer{Name: name, Acquirers: []lockbench.Acquirer{func(ctx context.Context) (func(), error) {
			set, err := g.AcquireAll(ctx, ks...)
			if err != nil {
				return nil, err
			}
			return func() { _ = set.Release(ctx) }, nil
		}}}
	}
	l := newLocker(b, c, redislock.Options{Prefix: "bench:"})
	locker := func() lockbench.Peer {
		ks := keys("locker")
		return lockbench.Peer{Name: "fenceguard-tryall", Acquirers: []lockbench.Acquirer{func(ctx context.Context) (func(), error) {
			leases, err := l.TryAcquireAll(ctx, ks, ttl)
			if err != nil {
				return nil, err
			}
			return func() {
				var wg sync.WaitGroup
				for _, lease := range leases {
					wg.Go(func() { _ = lease.Release(ctx) })
				}
				wg.Wait()
			}, nil
		}}}
	}
	obtainMulti := func() lockbench.Peer {
		bl := bsm.New(c)
		ks := keys("bsm")
		for i := range ks {
			ks[i] = "bench:" + ks[i]
		}
		return lockbench.Peer{Name: "bsm-obtainmulti", Acquirers: []lockbench.Acquirer{func(ctx context.Context) (func(), error) {
			lock, err := bl.ObtainMulti(ctx, ks, ttl, nil)
			if err != nil {
				return nil, err
			}
			return func() { _ = lock.Release(ctx) }, nil
		}}}
	}
	return []lockbench.Peer{
		viaGuard("guard-atonce", l),
		viaGuard("guard-onebyone", oneByOne{l}),
		locker(),
		obtainMulti(),
	}
}

// BenchmarkMultiKey compares holding 2, 4 and 8 keys together, uncontended:
// one acquire of the set and its release, the peers interleaved (see
// lockbench.CompareUncontended; one round is 100 cycles per peer, -benchtime
// Nx sets the rounds).
func BenchmarkMultiKey(b *testing.B) {
	c := benchClient(b)
	for _, n := range []int{2, 4, 8} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			lockbench.CompareUncontended(b, multiPeers(b, c, n), 100)
		})
	}
}

// BenchmarkMultiKeyPhases splits the cycle of the locker alone and of
// bsm/redislock into its acquire and its release (p50 of each), for 2, 4
// and 8 keys, the two interleaved cycle by cycle. The locker releases its
// leases one after another ("release") and, in a second pass, together
// ("release-together").
func BenchmarkMultiKeyPhases(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	const ttl = 10 * time.Second
	l := newLocker(b, c, redislock.Options{Prefix: "bench:"})
	bl := bsm.New(c)
	for _, n := range []int{2, 4, 8} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			ks, bk := make([]string, n), make([]string, n)
			for i := range ks {
				ks[i] = fmt.Sprintf("phases-%d", i)
				bk[i] = fmt.Sprintf("bench:bsm-phases-%d", i)
			}
			var acq, rel, relTogether, bacq, brel []time.Duration
			i := 0
			for b.Loop() {
				t0 := time.Now()
				leases, err := l.TryAcquireAll(ctx, ks, ttl)
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if i%2 == 0 {
					for _, lease := range leases {
						_ = lease.Release(ctx)
					}
					rel = append(rel, time.Since(t1))
				} else {
					var wg sync.WaitGroup
					for _, lease := range leases {
						wg.Go(func() { _ = lease.Release(ctx) })
					}
					wg.Wait()
					relTogether = append(relTogether, time.Since(t1))
				}
				acq = append(acq, t1.Sub(t0))
				t0 = time.Now()
				lock, err := bl.ObtainMulti(ctx, bk, ttl, nil)
				if err != nil {
					b.Fatal(err)
				}
				t1 = time.Now()
				_ = lock.Release(ctx)
				bacq = append(bacq, t1.Sub(t0))
				brel = append(brel, time.Since(t1))
				i++
			}
			for _, m := range []struct {
				name string
				d    []time.Duration
			}{
				{"fenceguard-acquire", acq}, {"fenceguard-release", rel}, {"fenceguard-release-together", relTogether},
				{"bsm-acquire", bacq}, {"bsm-release", brel},
			} {
				b.ReportMetric(p50(m.d), m.name+"-p50-µs")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

func p50(d []time.Duration) float64 {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return float64(d[len(d)/2]) / float64(time.Microsecond)
}
