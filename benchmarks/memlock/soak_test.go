// Package memlockbench_test soaks memlock: one hot key granted b.N times,
// and b.N distinct keys each locked once with a fenced write (a
// token.MemoryFence claim of the key). Each reports the first and the last
// tenth of its cycles and this process's heap and goroutines at its start
// and end. Results and the commands: docs/benchmarks.md, "Soak".
//
//	go test -run '^$' -bench 'HotKey|DistinctKeys' -benchtime 1000000x ./benchmarks/memlock
package memlockbench_test

import (
	"context"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/benchmarks/internal/lockbench"
	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/token"
)

func TestMain(m *testing.M) { harness.Main(m) }

const soakTTL = 10 * time.Second

func BenchmarkHotKey(b *testing.B) {
	l := memlock.New()
	lockbench.SoakKeys(b, lockbench.HotCycle(l, "hot", soakTTL), []lockbench.Probe{lockbench.Client})
}

// BenchmarkDistinctKeys: cycle i acquires key d<i>, claims resource d<i>
// on a MemoryFence with the lease's token and releases. The Locker keeps
// nothing of a released key; the fence keeps a mark per resource until
// its Prune (not run here), so the heap grows with the fence alone.
func BenchmarkDistinctKeys(b *testing.B) {
	l := memlock.New()
	var f token.MemoryFence
	lockbench.SoakKeys(b, lockbench.FencedCycle(l, soakTTL, &f), []lockbench.Probe{lockbench.Client})
}

// BenchmarkDistinctKeysLockOnly is BenchmarkDistinctKeys without the
// fence: what the Locker alone costs and keeps over b.N distinct keys.
func BenchmarkDistinctKeysLockOnly(b *testing.B) {
	l := memlock.New()
	lockbench.SoakKeys(b, func(ctx context.Context, i int) error {
		lease, err := l.Acquire(ctx, lockbench.DistinctKey(i), soakTTL)
		if err != nil {
			return err
		}
		return lease.Release(ctx)
	}, []lockbench.Probe{lockbench.Client})
}
