// Package lockbench measures lockers the same way for every backend and
// every peer library, so benchmark tables compare like with like.
package lockbench

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Acquirer takes the lock and returns its release.
type Acquirer func(ctx context.Context) (release func(), err error)

// Uncontended runs acquire+release cycles on one goroutine and reports
// their p50 and p99 besides ns/op.
func Uncontended(b *testing.B, acquire Acquirer) {
	ctx := context.Background()
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
}

// Contended runs workers goroutines (or clients: give each its own
// acquirer) on one key, each critical section cs of busy work (time.Sleep's
// granularity is too coarse), b.N critical sections in all. It reports
// critical sections per second, the acquire wait's p99, fairness as Jain's
// index over per-worker counts (1 is perfectly even), the hand-off gap from
// a release call to the next acquire's return (p50, p99), and how often the
// lock went back to the worker that had just released it.
func Contended(b *testing.B, acquirers []Acquirer, cs time.Duration) {
	workers := len(acquirers)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var (
		taken       atomic.Int64
		lastRelease atomic.Int64 // unix ns of the last release call
		lastHolder  atomic.Int64
		repeats     atomic.Int64
		failures    atomic.Int64
		wg          sync.WaitGroup
		counts      = make([]int, workers)
		waits       = make([][]time.Duration, workers)
		gaps        = make([][]time.Duration, workers)
	)
	lastHolder.Store(-1)
	total := int64(b.N)
	b.ResetTimer()
	start := time.Now()
	for w := range workers {
		acquire := acquirers[w]
		wg.Go(func() {
			for taken.Load() < total {
				t0 := time.Now()
				release, err := acquire(ctx)
				t1 := time.Now()
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					failures.Add(1)
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
				if lastHolder.Swap(int64(w)) == int64(w) {
					repeats.Add(1)
				}
				Busy(cs)
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
		b.Logf("%d acquire attempts failed and were retried", n)
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
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "cs/s")
	b.ReportMetric(float64(percentile(slices.Concat(waits...), 0.99))/float64(time.Millisecond), "wait-p99-ms")
	b.ReportMetric(jain, "jain")
	g := slices.Concat(gaps...)
	b.ReportMetric(us(percentile(g, 0.5)), "gap-p50-µs")
	b.ReportMetric(us(percentile(g, 0.99)), "gap-p99-µs")
	b.ReportMetric(float64(repeats.Load())/float64(b.N), "same-holder")
}

// Busy spins for d.
func Busy(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
