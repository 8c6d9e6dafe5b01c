// Consumer: fenceguard's guard with Prometheus metrics (metrics/prom).
package main

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/metrics/prom"
	"github.com/fenceguard/fenceguard/token"
)

func main() {
	m, err := prom.New(prometheus.DefaultRegisterer, prom.Options{})
	if err != nil {
		panic(err)
	}
	g, err := guard.New(memlock.New(), guard.Options{TTL: 15 * time.Second, Observer: m.Observe})
	if err != nil {
		panic(err)
	}
	fence := m.Fence(new(token.MemoryFence))
	_ = g.Do(context.Background(), "sku:42", func(ctx context.Context, t token.Token) error {
		return fence.Claim(ctx, "sku:42", t)
	})
	http.Handle("/metrics", promhttp.Handler())
	_ = http.ListenAndServe("127.0.0.1:0", nil)
}
