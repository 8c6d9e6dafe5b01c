// Package modebench compares ways of doing one database write — a plain
// statement against its fenced forms — on a shared machine, where a
// server's latency drifts from minute to minute. The modes take turns:
// each benchmark iteration is one round in which every mode runs for a
// slice of time, starting with a different mode each round, and the rates
// and ratios reported are over all rounds. Run it with -benchtime=Nx for N
// rounds.
package modebench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Slice is how long each mode runs in one round.
const Slice = 100 * time.Millisecond

// Mode is one way of doing the write, with tokens of type T (the
// library's token.Token). Op does it once on row (1 to the workload's
// rows) with tok, a token above every earlier burst's, as the i-th
// operation of its client in the burst.
type Mode[T ~uint64] struct {
	Name string
	Op   func(ctx context.Context, row int64, tok T, i int) error
}

// Workloads are the client and row counts Compare runs: one client and
// 8 clients, on one hot row and on 8 rows.
var Workloads = []struct{ Clients, Rows int }{{1, 1}, {1, 8}, {8, 1}, {8, 8}}

// Compare runs modes in rounds on each of Workloads, a sub-benchmark each,
// and reports every mode's rate (<name>-ops/s) and its ratio to the first
// mode's (<name>/<first>).
func Compare[T ~uint64](b *testing.B, modes []Mode[T]) {
	for _, w := range Workloads {
		b.Run(fmt.Sprintf("clients=%d/rows=%d", w.Clients, w.Rows), func(b *testing.B) {
			for _, m := range modes { // warm up: connections, statement caches
				burst(b, m, w.Clients, w.Rows, Slice/2)
			}
			ops := make([]int64, len(modes))
			took := make([]time.Duration, len(modes))
			b.ResetTimer()
			for r := range b.N {
				for k := range modes {
					i := (r + k) % len(modes)
					n, d := burst(b, modes[i], w.Clients, w.Rows, Slice)
					ops[i] += n
					took[i] += d
				}
			}
			rate := make([]float64, len(modes))
			for i, m := range modes {
				rate[i] = float64(ops[i]) / took[i].Seconds()
				b.ReportMetric(rate[i], m.Name+"-ops/s")
			}
			for i, m := range modes[1:] {
				b.ReportMetric(rate[i+1]/rate[0], m.Name+"/"+modes[0].Name)
			}
		})
	}
}

// burst runs m from clients goroutines for d and returns the operations
// done and the time they took. 8 clients on 8 rows have one row each; one
// client goes round the rows. Every access of a burst carries the same
// token, taken from the clock so that it is above every earlier burst's:
// one holder per row, accessing it again and again, always accepted.
func burst[T ~uint64](b *testing.B, m Mode[T], clients, rows int, d time.Duration) (int64, time.Duration) {
	ctx := context.Background()
	tok := T(time.Now().UnixMicro())
	var n atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for c := range clients {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				row := int64((c+clients*i)%rows + 1)
				if err := m.Op(ctx, row, tok, i); err != nil {
					b.Errorf("%s: %v", m.Name, err)
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return n.Load(), time.Since(start)
}
