package lockbench

import (
	"context"
	"flag"
	"testing"
	"time"
)

// soakWindowFlag sets how many cycles a soak's first and last windows each
// cover; 0 means a tenth of them.
var soakWindowFlag = flag.Int("soak.window", 0, "cycles in a soak's first and last windows (0: a tenth of the cycles)")

// soakWindow times a run of cycles, and the servers' CPU meanwhile.
type soakWindow struct {
	t0        time.Time
	cpu0      time.Duration
	took, cpu time.Duration
}

func (w *soakWindow) begin(servers []int) { w.t0, w.cpu0 = time.Now(), procCPU(servers) }
func (w *soakWindow) end(servers []int) {
	w.took, w.cpu = time.Since(w.t0), procCPU(servers)-w.cpu0
}

// Soak runs cycle b.N times in one goroutine (run it with -benchtime Nx:
// the number of cycles is the point) and reports, over the first and the
// last tenth of them (-soak.window cycles, if set), the mean cycle time — first-us/op, last-us/op and
// last/first — and, given the servers' process IDs, the CPU they used per
// cycle: srv-first-us/op, srv-last-us/op and srv-last/first (Linux; CPU is
// counted in 10ms ticks, so windows should be seconds long). cycle gets
// the cycle's number; a failed cycle fails the benchmark.
func Soak(b *testing.B, cycle func(ctx context.Context, i int) error, servers ...int) {
	ctx := context.Background()
	n := b.N
	w := max(n/10, 1)
	if *soakWindowFlag > 0 {
		w = min(*soakWindowFlag, n)
	}
	var first, last soakWindow
	b.ResetTimer()
	for i := range n {
		if i == 0 {
			first.begin(servers)
		}
		if i == n-w {
			last.begin(servers)
		}
		if err := cycle(ctx, i); err != nil {
			b.Fatalf("cycle %d: %v", i, err)
		}
		if i == w-1 {
			first.end(servers)
		}
		if i == n-1 {
			last.end(servers)
		}
	}
	b.StopTimer()
	per := func(d time.Duration) float64 { return us(d) / float64(w) }
	b.ReportMetric(per(first.took), "first-us/op")
	b.ReportMetric(per(last.took), "last-us/op")
	b.ReportMetric(float64(last.took)/float64(first.took), "last/first")
	if len(servers) > 0 && first.cpu > 0 {
		b.ReportMetric(per(first.cpu), "srv-first-us/op")
		b.ReportMetric(per(last.cpu), "srv-last-us/op")
		b.ReportMetric(float64(last.cpu)/float64(first.cpu), "srv-last/first")
	}
}
