package oteltrace_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/tracing/oteltrace"
)

// A loss the backend reports ([locks.LossNotifier]) reaches a guard
// through the traced lease at once, not at the next renewal.
func TestGuardSeesABackendLossThroughTheTracedLease(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	m := memlock.New()
	g, err := guard.New(oteltrace.Locker(m, tp), guard.Options{TTL: 30 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	err = g.Do(context.Background(), "sku:1", func(ctx context.Context, _ token.Token) error {
		m.Break("sku:1")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Second):
			t.Error("the critical section's context was not cancelled 2s after the backend reported the loss (the renewal is 10s away)")
			return nil
		}
	})
	if !errors.Is(err, guard.ErrLost) {
		t.Errorf("Do: %v, want ErrLost", err)
	}

	// A lease whose backend reports no losses reports none either.
	l, err := oteltrace.Locker(noLoss{m}, tp).Acquire(context.Background(), "sku:2", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	if n, ok := l.(locks.LossNotifier); ok && n.Lost() != nil {
		t.Error("a traced lease reports losses its backend cannot report")
	}
}

// noLoss is a locker whose leases do not implement locks.LossNotifier.
type noLoss struct{ *memlock.Locker }

func (n noLoss) Acquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	l, err := n.Locker.Acquire(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return struct{ locks.Lease }{l}, nil
}

// multiMem takes a set in one call, as redislock and etcdlock do, and
// counts the calls.
type multiMem struct {
	*memlock.Locker
	calls atomic.Int32
}

func (m *multiMem) TryAcquireAll(ctx context.Context, keys []string, ttl time.Duration) ([]locks.Lease, error) {
	m.calls.Add(1)
	var ls []locks.Lease
	for _, k := range keys {
		l, err := m.TryAcquire(ctx, k, ttl)
		if err != nil {
			for _, l := range ls {
				_ = l.Release(ctx)
			}
			return nil, err
		}
		ls = append(ls, l)
	}
	return ls, nil
}

// A traced locker that takes sets in one call ([locks.MultiTryAcquirer])
// still does, with a span and traced leases; one that does not claims
// nothing.
func TestTracedLockerTakesSetsInOneCall(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	if _, ok := oteltrace.Locker(memlock.New(), tp).(locks.MultiTryAcquirer); ok {
		t.Error("a traced memlock claims to take sets in one call")
	}
	inner := &multiMem{Locker: memlock.New()}
	l := oteltrace.Locker(inner, tp)
	if _, ok := l.(locks.MultiTryAcquirer); !ok {
		t.Fatal("a traced MultiTryAcquirer no longer is one: guard takes its sets key by key")
	}
	g, err := guard.New(l, guard.Options{TTL: 30 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	set, err := g.AcquireAll(ctx, "acct:2", "acct:1")
	if err != nil {
		t.Fatal(err)
	}
	if n := inner.calls.Load(); n != 1 {
		t.Errorf("the backend's TryAcquireAll was called %d times, want 1", n)
	}
	for _, k := range []string{"acct:1", "acct:2"} {
		if _, ok := set.Lease(k).Unwrap().(*oteltrace.Lease); !ok {
			t.Errorf("%q: lease %T, want a traced one", k, set.Lease(k).Unwrap())
		}
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	names := map[string]int{}
	for _, s := range rec.Ended() {
		names[s.Name()]++
	}
	if names["fenceguard.try_acquire_all"] != 1 || names["fenceguard.release"] != 2 {
		t.Errorf("spans %v, want one fenceguard.try_acquire_all and two fenceguard.release", names)
	}
}
