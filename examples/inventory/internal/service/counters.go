package service

import (
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Counters returns the fenceguard_* counters g holds, keyed by name and
// labels in the exposition format: `fenceguard_claims_total{class="sku",result="stale"}`.
func Counters(g prometheus.Gatherer) (map[string]float64, error) {
	mfs, err := g.Gather()
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetType() != dto.MetricType_COUNTER || !strings.HasPrefix(mf.GetName(), "fenceguard_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[seriesName(mf.GetName(), m.GetLabel())] += m.GetCounter().GetValue()
		}
	}
	return out, err
}

func seriesName(name string, labels []*dto.LabelPair) string {
	if len(labels) == 0 {
		return name
	}
	parts := make([]string, 0, len(labels))
	for _, l := range labels {
		parts = append(parts, l.GetName()+`="`+l.GetValue()+`"`)
	}
	sort.Strings(parts)
	return name + "{" + strings.Join(parts, ",") + "}"
}
