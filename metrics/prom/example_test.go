package prom_test

import (
	"fmt"
	"log"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fenceguard/fenceguard/metrics/prom"
)

// Counting the decisions of grpcmw's interceptors. The gRPC server hands
// each decision to Metrics.GRPC from its Observe hook; grpcmw is not
// imported here, so that grpc stays out of this module's graph:
//
//	fg, err := grpcmw.New(grpcmw.Options{
//		Resource: resource,
//		Fence:    m.Fence(fence), // claims in claims_total as well
//		Observe: func(_ context.Context, _ string, o grpcmw.Outcome) {
//			m.GRPC(o.Resource, string(o.Result))
//		},
//	})
//
// Below, the Outcomes such a server reports: holder 7 takes sku:42, holder
// 6 comes back from a pause, and two calls are refused before their key is
// derived. The key counts by its class, never as a label.
func ExampleMetrics_GRPC() {
	reg := prometheus.NewRegistry()
	m, err := prom.New(reg, prom.Options{
		Class: func(key string) string { c, _, _ := strings.Cut(key, ":"); return c }, // "sku:42" → "sku"
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, o := range []struct{ Resource, Result string }{ // grpcmw.Outcome's fields
		{"sku:42", "accepted"}, // token 7
		{"sku:42", "stale"},    // token 6: ABORTED
		{"", "missing"},        // no token: FAILED_PRECONDITION
		{"", "invalid"},        // "07": INVALID_ARGUMENT
	} {
		m.GRPC(o.Resource, o.Result)
	}

	mfs, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "fenceguard_grpc_calls_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			l := s.GetLabel()
			fmt.Printf("%s{%s=%q,%s=%q} %v\n", mf.GetName(), l[0].GetName(), l[0].GetValue(), l[1].GetName(), l[1].GetValue(), s.GetCounter().GetValue())
		}
	}
	// Output:
	// fenceguard_grpc_calls_total{class="none",result="invalid"} 1
	// fenceguard_grpc_calls_total{class="none",result="missing"} 1
	// fenceguard_grpc_calls_total{class="sku",result="accepted"} 1
	// fenceguard_grpc_calls_total{class="sku",result="stale"} 1
}
