// Package oteltrace wraps lockers and fences with OpenTelemetry spans, for
// services that trace: acquire, try-acquire, renew and release on the
// holder side, claim on the resource side. It is optional; the core
// packages do not depend on OpenTelemetry.
//
// Spans carry the lock or resource key (fenceguard.key) and the token
// (fenceguard.token); a failed call records its error and sets the span's
// status. Routine outcomes — not obtained, stale, not held — are recorded
// as the attribute fenceguard.outcome, not as span errors.
//
// The wrappers are safe for concurrent use when the wrapped values are.
package oteltrace

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/token"
)

const scope = "github.com/fenceguard/fenceguard/tracing/oteltrace"

func tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(scope)
}

// end finishes span with err, telling routine outcomes from failures.
func end(span trace.Span, err error) {
	switch {
	case err == nil:
		span.SetAttributes(attribute.String("fenceguard.outcome", "ok"))
	case errors.Is(err, locks.ErrNotObtained):
		span.SetAttributes(attribute.String("fenceguard.outcome", "not_obtained"))
	case errors.Is(err, locks.ErrNotHeld):
		span.SetAttributes(attribute.String("fenceguard.outcome", "not_held"))
	case errors.Is(err, token.ErrStale):
		span.SetAttributes(attribute.String("fenceguard.outcome", "stale"))
	default:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Locker returns l with spans around its calls, from tp (nil: the global
// provider). Its leases are wrapped too; [Lease.Unwrap] gives the
// backend's own. What the backend offers beside the calls passes
// through: a locker that takes several keys in one call
// ([locks.MultiTryAcquirer]) still does, so package guard's AcquireAll
// keeps its one round trip, and leases whose backend reports a loss
// ([locks.LossNotifier]) still report it, so a guard cancels the
// critical section at once.
func Locker(l locks.Locker, tp trace.TracerProvider) locks.Locker {
	w := &locker{l: l, t: tracer(tp)}
	if m, ok := l.(locks.MultiTryAcquirer); ok {
		return &multiLocker{locker: w, m: m}
	}
	return w
}

type locker struct {
	l locks.Locker
	t trace.Tracer
}

// multiLocker is the wrapper of a locker that takes several keys in one
// call.
type multiLocker struct {
	*locker
	m locks.MultiTryAcquirer
}

var _ locks.MultiTryAcquirer = (*multiLocker)(nil)

// TryAcquireAll implements [locks.MultiTryAcquirer]: one span around the
// backend's call, its leases wrapped.
func (w *multiLocker) TryAcquireAll(ctx context.Context, keys []string, ttl time.Duration) ([]locks.Lease, error) {
	ctx, span := w.t.Start(ctx, "fenceguard.try_acquire_all", trace.WithAttributes(
		attribute.StringSlice("fenceguard.keys", keys), attribute.Int64("fenceguard.ttl_ms", ttl.Milliseconds())))
	ls, err := w.m.TryAcquireAll(ctx, keys, ttl)
	end(span, err)
	if err != nil {
		return nil, err
	}
	out := make([]locks.Lease, len(ls))
	for i, l := range ls {
		out[i] = &Lease{Lease: l, t: w.t}
	}
	return out, nil
}

// MinTTL implements [locks.MinTTLer]: the wrapped locker's minimum (0 when
// it states none).
func (w *locker) MinTTL() time.Duration { return locks.MinTTL(w.l) }

func (w *locker) Acquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	return w.acquire(ctx, "fenceguard.acquire", key, ttl, w.l.Acquire)
}

func (w *locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	return w.acquire(ctx, "fenceguard.try_acquire", key, ttl, w.l.TryAcquire)
}

func (w *locker) acquire(ctx context.Context, name, key string, ttl time.Duration,
	fn func(context.Context, string, time.Duration) (locks.Lease, error)) (locks.Lease, error) {
	ctx, span := w.t.Start(ctx, name, trace.WithAttributes(
		attribute.String("fenceguard.key", key), attribute.Int64("fenceguard.ttl_ms", ttl.Milliseconds())))
	l, err := fn(ctx, key, ttl)
	if err != nil {
		end(span, err)
		return nil, err
	}
	span.SetAttributes(tokenAttr(l.Token()))
	end(span, nil)
	return &Lease{Lease: l, t: w.t}, nil
}

func tokenAttr(t token.Token) attribute.KeyValue {
	// Attributes hold int64; tokens beyond that are rare and go as text.
	if t > 1<<63-1 {
		return attribute.String("fenceguard.token", t.String())
	}
	return attribute.Int64("fenceguard.token", int64(t))
}

// Lease is a lease with spans around Renew and Release.
type Lease struct {
	locks.Lease
	t trace.Tracer
}

// Unwrap returns the backend's lease.
func (l *Lease) Unwrap() locks.Lease { return l.Lease }

var _ locks.LossNotifier = (*Lease)(nil)

// Lost implements [locks.LossNotifier] with the backend lease's channel,
// or nil, which is never ready, when the backend reports no losses.
func (l *Lease) Lost() <-chan struct{} {
	if n, ok := l.Lease.(locks.LossNotifier); ok {
		return n.Lost()
	}
	return nil
}

// Renew implements [locks.Lease].
func (l *Lease) Renew(ctx context.Context) error {
	return l.span(ctx, "fenceguard.renew", l.Lease.Renew)
}

// Release implements [locks.Lease].
func (l *Lease) Release(ctx context.Context) error {
	return l.span(ctx, "fenceguard.release", l.Lease.Release)
}

func (l *Lease) span(ctx context.Context, name string, fn func(context.Context) error) error {
	ctx, span := l.t.Start(ctx, name, trace.WithAttributes(attribute.String("fenceguard.key", l.Key()), tokenAttr(l.Token())))
	err := fn(ctx)
	end(span, err)
	return err
}

// Fence returns f with a span around every claim, from tp (nil: the
// global provider).
func Fence(f token.Fence, tp trace.TracerProvider) token.Fence {
	return &fence{f: f, t: tracer(tp)}
}

type fence struct {
	f token.Fence
	t trace.Tracer
}

func (f *fence) Claim(ctx context.Context, resource string, t token.Token) error {
	ctx, span := f.t.Start(ctx, "fenceguard.claim", trace.WithAttributes(attribute.String("fenceguard.key", resource), tokenAttr(t)))
	var stale *token.StaleError
	err := f.f.Claim(ctx, resource, t)
	if errors.As(err, &stale) {
		span.SetAttributes(attribute.String("fenceguard.current", stale.Current.String()))
	}
	end(span, err)
	return err
}
