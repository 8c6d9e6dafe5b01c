package prom_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/metrics/prom"
)

// A Class that cuts keys by bytes can cut a character in two; Prometheus
// panics on a label that is not UTF-8, and these methods run inside
// middleware and lock callbacks, where a panic kills the call or the
// process. Such a class counts as "other", and a tracked resource whose
// key is not UTF-8 gets no gauge.
func TestClassNotUTF8CountsAsOther(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := prom.New(reg, prom.Options{
		Class: func(k string) string {
			if len(k) > 5 {
				return k[:5]
			}
			return k
		},
		TrackHighWater: func(string) bool { return true },
	})
	if err != nil {
		t.Fatal(err)
	}
	const key = "sku:\u00e91" // the class cuts the é in two
	m.GRPC(key, "accepted")
	m.Claim(key, 7, nil)
	m.Claim("sku:\xff", 7, nil)
	m.Observe(guard.Event{Kind: guard.Acquired, Key: key})
	want := `
# HELP fenceguard_grpc_calls_total ` + grpcHelp(t, reg) + `
# TYPE fenceguard_grpc_calls_total counter
fenceguard_grpc_calls_total{class="other",result="accepted"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fenceguard_grpc_calls_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "fenceguard_high_water"); n != 1 {
		t.Fatalf("%d high-water gauges, want 1 (the UTF-8 key)", n)
	}
}

func grpcHelp(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "fenceguard_grpc_calls_total" {
			return mf.GetHelp()
		}
	}
	t.Fatal("no grpc_calls_total")
	return ""
}
