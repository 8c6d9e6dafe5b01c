// Peer: spans around a critical section with the OpenTelemetry API directly.
package main

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
)

func main() {
	tr := otel.Tracer("example")
	ctx, span := tr.Start(context.Background(), "acquire")
	span.SetAttributes(attribute.String("key", "sku:42"))
	var mu sync.Mutex
	mu.Lock()
	_, inner := tr.Start(ctx, "claim")
	inner.End()
	mu.Unlock()
	span.End()
}
