package oteltrace_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/tracing/oteltrace"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func attr(s sdktrace.ReadOnlySpan, k string) attribute.Value {
	for _, a := range s.Attributes() {
		if string(a.Key) == k {
			return a.Value
		}
	}
	return attribute.Value{}
}

func TestSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	ctx := context.Background()

	l := oteltrace.Locker(memlock.New(), tp)
	lease, err := l.Acquire(ctx, "sku:1", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, "sku:1", time.Second); !errors.Is(err, locks.ErrNotObtained) {
		t.Fatalf("TryAcquire: %v", err)
	}
	if err := lease.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, "", time.Second); !errors.Is(err, locks.ErrInvalidArgument) {
		t.Fatalf("Acquire with no key: %v", err)
	}
	f := oteltrace.Fence(&token.MemoryFence{}, tp)
	_ = f.Claim(ctx, "sku:1", 9)
	_ = f.Claim(ctx, "sku:1", 8)

	spans := rec.Ended()
	want := []struct {
		name, outcome string
		errored       bool
	}{
		{"fenceguard.acquire", "ok", false},
		{"fenceguard.try_acquire", "not_obtained", false},
		{"fenceguard.renew", "ok", false},
		{"fenceguard.release", "ok", false},
		{"fenceguard.acquire", "", true},
		{"fenceguard.claim", "ok", false},
		{"fenceguard.claim", "stale", false},
	}
	if len(spans) != len(want) {
		t.Fatalf("%d spans, want %d", len(spans), len(want))
	}
	for i, w := range want {
		s := spans[i]
		if s.Name() != w.name || attr(s, "fenceguard.outcome").AsString() != w.outcome || (s.Status().Code == codes.Error) != w.errored {
			t.Errorf("span %d: %s outcome=%q status=%v, want %s %q errored=%v", i, s.Name(),
				attr(s, "fenceguard.outcome").AsString(), s.Status().Code, w.name, w.outcome, w.errored)
		}
	}
	if tok := attr(spans[0], "fenceguard.token").AsInt64(); tok != int64(lease.Token()) {
		t.Errorf("acquire span token %d, want %d", tok, lease.Token())
	}
	if cur := attr(spans[6], "fenceguard.current").AsString(); cur != "9" {
		t.Errorf("stale claim span current %q, want 9", cur)
	}
	if lease.(*oteltrace.Lease).Unwrap() == nil {
		t.Error("Unwrap returned nil")
	}
}
