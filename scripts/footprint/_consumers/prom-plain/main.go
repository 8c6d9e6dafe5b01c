// Peer: the same counters and histogram, with client_golang directly.
package main

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	acq := promauto.NewCounterVec(prometheus.CounterOpts{Name: "acquisitions_total"}, []string{"class"})
	wait := promauto.NewHistogramVec(prometheus.HistogramOpts{Name: "acquire_wait_seconds"}, []string{"class"})
	start := time.Now()
	acq.WithLabelValues("sku").Inc()
	wait.WithLabelValues("sku").Observe(time.Since(start).Seconds())
	http.Handle("/metrics", promhttp.Handler())
	_ = http.ListenAndServe("127.0.0.1:0", nil)
}
