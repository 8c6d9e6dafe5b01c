package lockbench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Keys is the key space of the many-keys benchmarks: keys are 0 … Keys-1.
const Keys = 10_000

// Workers is how many goroutines run cycles at once in the many-keys
// benchmarks.
const Workers = 64

// KeyAcquirer takes the lock of key and returns the work to do while
// holding it (nil: none) and its release. Ceilings (a raw server write, no
// lock) return the write's outcome as err and nil for both.
type KeyAcquirer func(ctx context.Context, key int) (work func(context.Context) error, release func(), err error)

// ErrBusy is what a reference cycle without waiting (a bare SET NX) returns
// for a taken key: counted in errors/cycle, not logged.
var ErrBusy = errors.New("lockbench: key taken")

// KeyPeer is one contender in [CompareManyKeys].
type KeyPeer struct {
	Name string
	// Acquirers: one per worker ([Workers] of them), or fewer, shared
	// round robin (worker w uses Acquirers[w%len]).
	Acquirers []KeyAcquirer
	// Ceiling marks the server's own single-write loop: every other peer
	// is also reported as a fraction of it.
	Ceiling bool
}

// Dist draws keys.
type Dist struct {
	Name string
	// New returns a key source for one worker, seeded by seed.
	New func(seed uint64) func() int
}

// Uniform draws every key alike.
var Uniform = Dist{"uniform", func(seed uint64) func() int {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	return func() int { return r.IntN(Keys) }
}}

// ZipfS is the skew of [Zipf]: with 10,000 keys the hottest key takes
// about 15% of the cycles, the ten hottest 41%, the hundred hottest 65%.
const ZipfS = 1.1

// Zipf draws key k with probability proportional to 1/(k+1)^ZipfS.
var Zipf = Dist{"zipf", func(seed uint64) func() int {
	z := rand.NewZipf(rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), ZipfS, 1, Keys-1)
	return func() int { return int(z.Uint64()) }
}}

// sliceFlag is how long each peer runs in one round of [CompareManyKeys]
// (a test binary's flag: go test … -args -manykeys.slice=1s).
var sliceFlag = flag.Duration("manykeys.slice", 500*time.Millisecond, "how long each peer runs in one round of the many-keys benchmarks")

// peersFlag selects peers by name (a regexp), to profile one alone.
var peersFlag = flag.String("manykeys.peers", "", "run only the many-keys peers whose name matches this regexp")

type keyStats struct {
	cycles int64
	errors int64
	took   time.Duration
	// CPU time used while the peer ran: this process's (the clients) and
	// the server processes'.
	clientCPU, serverCPU time.Duration
	acq                  []time.Duration
	work                 []time.Duration
	cycle                []time.Duration
}

// CompareManyKeys runs b.N rounds; in each, every peer in turn (starting
// with a different one each round) runs [Workers] goroutines for one slice
// (-manykeys.slice, 500ms), each repeating a cycle — draw a key from dist, acquire its lock,
// do the work, release — and waits for the cycles in flight. Every peer
// sees the same key sequences in a round (worker w's source is seeded by
// round and w). It reports per peer cycles/s, the acquire's p50 and p99 (in
// µs; for a ceiling, the write's), the work's (the critical section's) and
// the whole cycle's, and errors per cycle; the first peer's
// cycles/s as a ratio of every other's (first/other); and, when a peer is
// the Ceiling, every other as a fraction of it (other/ceiling).
//
// One slice of every peer first warms up connections, statement caches and
// the servers' paths, uncounted.
//
// servers are the process ids of the servers involved (0s are skipped):
// their CPU time and this process's (the clients') are reported per cycle,
// with clock-tick resolution (10ms) summed over all rounds.
func CompareManyKeys(b *testing.B, peers []KeyPeer, dist Dist, servers ...int) {
	if *peersFlag != "" {
		re, err := regexp.Compile(*peersFlag)
		if err != nil {
			b.Fatal(err)
		}
		peers = slices.DeleteFunc(slices.Clone(peers), func(p KeyPeer) bool { return !re.MatchString(p.Name) })
		if len(peers) == 0 {
			b.Skipf("no peer matches -manykeys.peers=%s", *peersFlag)
		}
	}
	res := make([]keyStats, len(peers))
	slice := *sliceFlag
	for i := range peers {
		runKeys(b, peers[i], dist, 1<<62+uint64(i), slice/2)
	}
	b.ResetTimer()
	for r := range b.N {
		for k := range peers {
			i := (r + k) % len(peers)
			c0, s0 := selfCPU(), procCPU(servers)
			st := runKeys(b, peers[i], dist, uint64(r), slice)
			a := &res[i]
			a.clientCPU += selfCPU() - c0
			a.serverCPU += procCPU(servers) - s0
			a.cycles += st.cycles
			a.errors += st.errors
			a.took += st.took
			a.acq = append(a.acq, st.acq...)
			a.work = append(a.work, st.work...)
			a.cycle = append(a.cycle, st.cycle...)
		}
	}
	b.StopTimer()
	rate := make([]float64, len(peers))
	ceiling := -1
	for i, p := range peers {
		st := res[i]
		rate[i] = float64(st.cycles) / st.took.Seconds()
		b.ReportMetric(rate[i], p.Name+"-cycles/s")
		b.ReportMetric(us(percentile(st.acq, 0.5)), p.Name+"-acq-p50-µs")
		b.ReportMetric(us(percentile(st.acq, 0.99)), p.Name+"-acq-p99-µs")
		if len(st.work) > 0 {
			b.ReportMetric(us(percentile(st.work, 0.5)), p.Name+"-work-p50-µs")
			b.ReportMetric(us(percentile(st.work, 0.99)), p.Name+"-work-p99-µs")
		}
		b.ReportMetric(us(percentile(st.cycle, 0.99)), p.Name+"-cycle-p99-µs")
		b.ReportMetric(float64(st.errors)/float64(max(st.cycles, 1)), p.Name+"-errors/cycle")
		b.ReportMetric(us(st.clientCPU)/float64(max(st.cycles, 1)), p.Name+"-client-cpu-µs/cycle")
		if len(servers) > 0 {
			b.ReportMetric(us(st.serverCPU)/float64(max(st.cycles, 1)), p.Name+"-server-cpu-µs/cycle")
		}
		if p.Ceiling {
			ceiling = i
		}
	}
	for i, p := range peers[1:] {
		if !p.Ceiling {
			b.ReportMetric(rate[0]/rate[i+1], peers[0].Name+"/"+p.Name)
		}
	}
	if ceiling >= 0 {
		for i, p := range peers {
			if i != ceiling {
				b.ReportMetric(rate[i]/rate[ceiling], p.Name+"/"+peers[ceiling].Name)
			}
		}
	}
	b.ReportMetric(0, "ns/op")
}

// runKeys runs p's workers for d and returns what they did.
func runKeys(b *testing.B, p KeyPeer, dist Dist, round uint64, d time.Duration) keyStats {
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	var (
		cycles, failed atomic.Int64
		wg             sync.WaitGroup
		acq            = make([][]time.Duration, Workers)
		wrk            = make([][]time.Duration, Workers)
		cyc            = make([][]time.Duration, Workers)
		firstErr       sync.Once
	)
	start := time.Now()
	deadline := start.Add(d)
	for w := range Workers {
		acquire := p.Acquirers[w%len(p.Acquirers)]
		next := dist.New(round<<8 | uint64(w))
		wg.Go(func() {
			for time.Now().Before(deadline) {
				key := next()
				t0 := time.Now()
				work, release, err := acquire(ctx, key)
				t1 := time.Now()
				if err == nil && work != nil {
					err = work(ctx)
					wrk[w] = append(wrk[w], time.Since(t1))
				}
				if release != nil {
					release()
				}
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					failed.Add(1)
					if !errors.Is(err, ErrBusy) {
						firstErr.Do(func() { b.Logf("%s: key %d: %v", p.Name, key, err) })
					}
					continue
				}
				acq[w] = append(acq[w], t1.Sub(t0))
				cyc[w] = append(cyc[w], time.Since(t0))
				cycles.Add(1)
			}
		})
	}
	wg.Wait()
	st := keyStats{cycles: cycles.Load(), errors: failed.Load(), took: time.Since(start)}
	for w := range Workers {
		st.acq = append(st.acq, acq[w]...)
		st.work = append(st.work, wrk[w]...)
		st.cycle = append(st.cycle, cyc[w]...)
	}
	if ctx.Err() != nil {
		b.Errorf("lockbench: %s: cycles still running a minute after the slice ended", p.Name)
	}
	if st.cycles == 0 {
		b.Errorf("lockbench: %s: no cycle done in %v (%d errors)", p.Name, st.took, st.errors)
	}
	return st
}

// KeyName is the lock key of key k, "k00042" (built once, so that no
// peer's cycle pays for formatting it).
func KeyName(k int) string { return keyNames[k] }

var keyNames = func() []string {
	s := make([]string, Keys)
	for k := range s {
		s[k] = fmt.Sprintf("k%05d", k)
	}
	return s
}()

// procCPU is the CPU time the processes and their children (PostgreSQL's
// backends) used so far, from /proc (Linux; 0 elsewhere), in clock ticks
// of 10ms.
func procCPU(pids []int) time.Duration {
	if len(pids) == 0 {
		return 0
	}
	want := map[int]bool{}
	for _, p := range pids {
		if p != 0 {
			want[p] = true
		}
	}
	ents, _ := os.ReadDir("/proc")
	var sum time.Duration
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The fields after the command name (in parentheses, which may
		// hold spaces): state, ppid, …, utime and stime 12th and 13th.
		f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
		if len(f) < 13 {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); !want[pid] && !want[ppid] {
			continue
		}
		for _, s := range f[11:13] {
			n, _ := strconv.ParseInt(s, 10, 64)
			sum += time.Duration(n) * 10 * time.Millisecond
		}
	}
	return sum
}
