// Consumer: fenceguard's guard traced with OpenTelemetry (tracing/oteltrace).
package main

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/tracing/oteltrace"
)

func main() {
	tp := otel.GetTracerProvider()
	g, err := guard.New(oteltrace.Locker(memlock.New(), tp), guard.Options{TTL: 15 * time.Second})
	if err != nil {
		panic(err)
	}
	fence := oteltrace.Fence(new(token.MemoryFence), tp)
	_ = g.Do(context.Background(), "sku:42", func(ctx context.Context, t token.Token) error {
		return fence.Claim(ctx, "sku:42", t)
	})
}
