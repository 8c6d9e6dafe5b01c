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

// Contended runs the acquirers (one per worker: give each its own client
// where the benchmark calls for clients) on one key, each critical section
// cs of busy work (time.Sleep's granularity is too coarse), b.N critical
// sections in all. It reports critical sections per second, the acquire
// wait's p99, fairness as Jain's index over per-worker counts (1 is
// perfectly even), the hand-off gap from a release call to the next
// acquire's return (p50, p99), and how often the lock went back to the
// worker that had just released it.
func Contended(b *testing.B, acquirers []Acquirer, cs time.Duration) {
	b.ResetTimer()
	st := contend(b, acquirers, cs, b.N)
	b.StopTimer()
	report(b, "", st)
}

func report(b *testing.B, prefix string, st contention) {
	var sum, sumSq float64
	for _, c := range st.counts {
		sum += float64(c)
		sumSq += float64(c) * float64(c)
	}
	jain := 1.0
	if sumSq > 0 {
		jain = sum * sum / (float64(len(st.counts)) * sumSq)
	}
	b.ReportMetric(float64(st.done())/st.took.Seconds(), prefix+"cs/s")
	b.ReportMetric(float64(st.errors)/float64(max(st.done(), 1)), prefix+"errors/cs")
	b.ReportMetric(float64(percentile(st.waits, 0.99))/float64(time.Millisecond), prefix+"wait-p99-ms")
	b.ReportMetric(jain, prefix+"jain")
	b.ReportMetric(us(percentile(st.gaps, 0.5)), prefix+"gap-p50-µs")
	b.ReportMetric(us(percentile(st.gaps, 0.99)), prefix+"gap-p99-µs")
	b.ReportMetric(float64(st.sameHolder)/float64(max(st.done(), 1)), prefix+"same-holder")
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

// Peer is one contender in an interleaved comparison.
type Peer struct {
	Name string
	// Acquirers: one per worker (give each its own client where the
	// benchmark calls for clients); Uncontended uses the first.
	Acquirers []Acquirer
}

// CompareUncontended runs b.N rounds; in each, every peer (starting with a
// different one each round) does ops acquire+release cycles. Interleaving
// puts every peer through the same minutes of a noisy machine, so their
// ratios hold even when absolute figures drift. It reports each peer's p50
// and mean, and the mean's ratio to the first peer's.
func CompareUncontended(b *testing.B, peers []Peer, ops int) {
	ctx := context.Background()
	lat := make([][]time.Duration, len(peers))
	b.ResetTimer()
	for r := range b.N {
		for k := range peers {
			i := (r + k) % len(peers)
			acquire := peers[i].Acquirers[0]
			for range ops {
				t0 := time.Now()
				release, err := acquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				release()
				lat[i] = append(lat[i], time.Since(t0))
			}
		}
	}
	b.StopTimer()
	means := make([]float64, len(peers))
	for i, p := range peers {
		var sum time.Duration
		for _, d := range lat[i] {
			sum += d
		}
		means[i] = us(sum) / float64(len(lat[i]))
		b.ReportMetric(us(percentile(lat[i], 0.5)), p.Name+"-p50-µs")
		b.ReportMetric(means[i], p.Name+"-mean-µs")
	}
	for i, p := range peers[1:] {
		b.ReportMetric(means[0]/means[i+1], peers[0].Name+"/"+p.Name)
	}
	b.ReportMetric(0, "ns/op")
}

// CompareContended runs b.N rounds; in each, every peer in turn runs its
// workers on one key for cs-long critical sections, n critical sections
// in all. It reports per peer what [Contended] reports, over all rounds.
func CompareContended(b *testing.B, peers []Peer, cs time.Duration, n int) {
	res := make([]contention, len(peers))
	for i, p := range peers {
		res[i].counts = make([]int, len(p.Acquirers))
	}
	b.ResetTimer()
	for r := range b.N {
		for k := range peers {
			i := (r + k) % len(peers)
			st := contend(b, peers[i].Acquirers, cs, n)
			a := &res[i]
			a.took += st.took
			a.waits = append(a.waits, st.waits...)
			a.gaps = append(a.gaps, st.gaps...)
			a.sameHolder += st.sameHolder
			a.errors += st.errors
			for w, c := range st.counts {
				a.counts[w] += c
			}
		}
	}
	b.StopTimer()
	for i, p := range peers {
		report(b, p.Name+"-", res[i])
	}
	b.ReportMetric(0, "ns/op")
}

type contention struct {
	errors     int // failed acquires, retried (a peer may give up while the lock is busy)
	took       time.Duration
	waits      []time.Duration
	gaps       []time.Duration
	counts     []int
	sameHolder int
}

// contend runs the acquirers on one key until n critical sections are done.
func contend(b *testing.B, acquirers []Acquirer, cs time.Duration, n int) contention {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	workers := len(acquirers)
	var (
		taken       atomic.Int64
		lastRelease atomic.Int64
		lastHolder  atomic.Int64
		repeats     atomic.Int64
		failed      atomic.Int64
		wg          sync.WaitGroup
		counts      = make([]int, workers)
		waits       = make([][]time.Duration, workers)
		gaps        = make([][]time.Duration, workers)
	)
	lastHolder.Store(-1)
	start := time.Now()
	for w := range workers {
		acquire := acquirers[w]
		wg.Go(func() {
			for taken.Load() < int64(n) {
				t0 := time.Now()
				release, err := acquire(ctx)
				t1 := time.Now()
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					failed.Add(1)
					continue
				}
				if taken.Add(1) > int64(n) {
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
	st := contention{errors: int(failed.Load()), took: time.Since(start), waits: slices.Concat(waits...), gaps: slices.Concat(gaps...),
		counts: counts, sameHolder: int(repeats.Load())}
	if done := st.done(); done < n {
		b.Errorf("lockbench: only %d of %d critical sections done in %v (%d failed acquires): the numbers would mean nothing", done, n, st.took, st.errors)
	}
	return st
}

// done is the number of critical sections completed.
func (st contention) done() int {
	var d int
	for _, c := range st.counts {
		d += c
	}
	return d
}
