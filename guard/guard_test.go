package guard_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/harness/fakeclock"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/token"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// guardClock makes a fake clock a guard.Clock.
type guardClock struct{ *fakeclock.Clock }

func (c guardClock) NewTimer(d time.Duration) guard.Timer { return c.Clock.NewTimer(d) }
func (c guardClock) AfterFunc(d time.Duration, f func()) guard.Timer {
	return c.Clock.AfterFunc(d, f)
}

func newGuard(t *testing.T, l locks.Locker, o guard.Options) *guard.Guard {
	t.Helper()
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	g, err := guard.New(l, o)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// events records what the Observer saw.
type events struct {
	mu  sync.Mutex
	all []guard.Event
}

func (e *events) observe(ev guard.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

func (e *events) count(k guard.EventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.all {
		if ev.Kind == k {
			n++
		}
	}
	return n
}

func (e *events) last(k guard.EventKind) (guard.Event, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := len(e.all) - 1; i >= 0; i-- {
		if e.all[i].Kind == k {
			return e.all[i], true
		}
	}
	return guard.Event{}, false
}

func assertFree(t *testing.T, l locks.Locker, key string) {
	t.Helper()
	lease, err := l.TryAcquire(context.Background(), key, time.Second)
	if err != nil {
		t.Fatalf("%q should be free: %v", key, err)
	}
	_ = lease.Release(context.Background())
}

func assertHeld(t *testing.T, l locks.Locker, key string) {
	t.Helper()
	lease, err := l.TryAcquire(context.Background(), key, time.Second)
	if err == nil {
		_ = lease.Release(context.Background())
		t.Fatalf("%q should be held", key)
	}
	if !errors.Is(err, locks.ErrNotObtained) {
		t.Fatalf("TryAcquire(%q): %v", key, err)
	}
}

func TestDo(t *testing.T) {
	ml := memlock.New()
	var ev events
	g := newGuard(t, ml, guard.Options{TTL: 5 * time.Second, Observer: ev.observe})
	var got token.Token
	err := g.Do(testCtx(t), "sku:1", func(ctx context.Context, tok token.Token) error {
		key, ctxTok, ok := token.FromContext(ctx)
		if !ok || key != "sku:1" || ctxTok != tok || tok == 0 {
			t.Errorf("fn ctx carries %q %d %v; fn got token %d", key, ctxTok, ok, tok)
		}
		assertHeld(t, ml, "sku:1")
		got = tok
		return nil
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	assertFree(t, ml, "sku:1")
	if ev.count(guard.Acquired) != 1 || ev.count(guard.Released) != 1 {
		t.Errorf("events %+v, want one acquired and one released", ev.all)
	}
	if e, _ := ev.last(guard.Acquired); e.Token != got || e.Key != "sku:1" {
		t.Errorf("acquired event %+v", e)
	}
}

func TestDoReturnsFnErrorAndReleases(t *testing.T) {
	ml := memlock.New()
	g := newGuard(t, ml, guard.Options{TTL: 5 * time.Second})
	boom := errors.New("boom")
	err := g.Do(testCtx(t), "k", func(context.Context, token.Token) error { return boom })
	if !errors.Is(err, boom) || errors.Is(err, guard.ErrLost) {
		t.Fatalf("Do = %v, want boom only", err)
	}
	assertFree(t, ml, "k")
}

func TestDoReleasesOnPanic(t *testing.T) {
	ml := memlock.New()
	g := newGuard(t, ml, guard.Options{TTL: 5 * time.Second})
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want the fn's panic", r)
			}
		}()
		_ = g.Do(testCtx(t), "k", func(context.Context, token.Token) error { panic("boom") })
	}()
	assertFree(t, ml, "k")
}

// An operator (or a bug) deletes the lock behind the holder's back. The next
// renewal is refused, and the lease context must be cancelled within the
// TTL, with a cause that says so.
func TestLeaseDeletedBehindBackIsDetected(t *testing.T) {
	ml := memlock.New()
	var ev events
	const ttl = 300 * time.Millisecond
	g := newGuard(t, ml, guard.Options{TTL: ttl, Observer: ev.observe})
	lease, err := g.Acquire(testCtx(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	broken := time.Now()
	late := lateness(ttl)
	if !ml.Break("k") {
		t.Fatal("Break found nothing held")
	}
	select {
	case <-lease.Context().Done():
	case <-time.After(ttl):
		// Allow for the scheduler: as late again as a timer of the TTL was.
		select {
		case <-lease.Context().Done():
		case <-time.After(late()):
			t.Fatalf("lease context still live %v after the lock was deleted", time.Since(broken))
		}
	}
	t.Logf("loss detected %v after the deletion", time.Since(broken))
	cause := context.Cause(lease.Context())
	if !errors.Is(cause, guard.ErrLost) || !errors.Is(cause, locks.ErrNotHeld) {
		t.Fatalf("cause %v, want ErrLost wrapping locks.ErrNotHeld", cause)
	}
	if want := fmt.Sprintf("%q (token %d)", "k", lease.Token()); !strings.Contains(cause.Error(), want) {
		t.Errorf("cause %q does not name the lease %s", cause, want)
	}
	if err := lease.Release(context.Background()); !errors.Is(err, guard.ErrLost) {
		t.Errorf("Release after loss = %v, want ErrLost", err)
	}
	if ev.count(guard.Lost) != 1 {
		t.Errorf("%d lost events, want 1", ev.count(guard.Lost))
	}
}

func TestKeepAliveHoldsPastTTL(t *testing.T) {
	ml := memlock.New()
	var ev events
	const ttl = 600 * time.Millisecond // renewals every 200ms: room for a loaded scheduler
	g := newGuard(t, ml, guard.Options{TTL: ttl, Observer: ev.observe})
	lease, err := g.Acquire(testCtx(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	for range 8 { // 8 × ttl/2 = four TTLs
		time.Sleep(ttl / 2)
		assertHeld(t, ml, "k")
	}
	if err := lease.Context().Err(); err != nil {
		t.Fatalf("lease context ended: %v", context.Cause(lease.Context()))
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := ev.count(guard.Renewed); n < 8 {
		t.Errorf("%d renewals in four TTLs at TTL/3, want at least 8", n)
	}
	if !errors.Is(context.Cause(lease.Context()), guard.ErrReleased) {
		t.Errorf("cause after release: %v", context.Cause(lease.Context()))
	}
	assertFree(t, ml, "k")
}

// faulty wraps a real locker and injects faults into its leases.
type faulty struct {
	locks.Locker
	acquireFailures atomic.Int32 // fail this many Acquires first
	renewErr        atomic.Pointer[error]
	renewBlocks     atomic.Bool                   // Renew waits for its ctx
	renewHeld       atomic.Pointer[chan struct{}] // Renew waits for it to close, ignoring its ctx
	renews          atomic.Int32
	lateRenews      atomic.Int32 // Renews entered after the guard's Release returned
}

func (f *faulty) Acquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	if f.acquireFailures.Add(-1) >= 0 {
		return nil, errors.New("connection refused")
	}
	l, err := f.Locker.Acquire(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return &faultyLease{Lease: l, f: f}, nil
}

type faultyLease struct {
	locks.Lease
	f        *faulty
	released atomic.Bool // the locker's Release has run
	returned atomic.Bool // the guard's Release has returned
}

func (l *faultyLease) Renew(ctx context.Context) error {
	if l.returned.Load() {
		l.f.lateRenews.Add(1)
	}
	l.f.renews.Add(1)
	if l.f.renewBlocks.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	if p := l.f.renewHeld.Load(); p != nil {
		<-*p
		return l.Lease.Renew(ctx)
	}
	if p := l.f.renewErr.Load(); p != nil {
		return *p
	}
	return l.Lease.Renew(ctx)
}

func (l *faultyLease) Release(ctx context.Context) error {
	err := l.Lease.Release(ctx)
	l.released.Store(true)
	return err
}

// Renewals fail (server unreachable) and the client's clock jumps: the lease
// must count as lost at the local deadline, not before, with the last
// renewal error in the cause.
func TestRenewalFailuresLoseAtLocalDeadline(t *testing.T) {
	f := &faulty{Locker: memlock.New()}
	unreachable := errors.New("dial tcp: connection refused")
	f.renewErr.Store(&unreachable)
	clock := fakeclock.New(time.Date(1984, time.April, 4, 0, 0, 0, 0, time.UTC))
	var ev events
	const ttl = 30 * time.Second
	g := newGuard(t, f, guard.Options{TTL: ttl, Clock: guardClock{clock}, Observer: ev.observe})
	ctx := testCtx(t)
	lease, err := g.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	// Waiters: the deadline timer and the renewal timer.
	if err := clock.BlockUntil(ctx, 2); err != nil {
		t.Fatal(err)
	}
	clock.Advance(ttl / 3) // first renewal: fails
	waitFor(t, func() bool { return ev.count(guard.RenewFailed) >= 1 })
	if lease.Context().Err() != nil {
		t.Fatal("a failed (not refused) renewal ended the lease before its deadline")
	}
	left := lease.Deadline().Sub(clock.Now())
	if want := ttl - ttl/3 - ttl/100; left > want || left < want-time.Second {
		t.Errorf("local deadline %v ahead, want about %v (TTL·(1-Drift) from the grant)", left, want)
	}
	clock.Advance(left - time.Millisecond)
	if lease.Context().Err() != nil {
		t.Fatal("lease lost before its local deadline")
	}
	clock.Advance(time.Millisecond)
	select {
	case <-lease.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lease context still live past the local deadline")
	}
	cause := context.Cause(lease.Context())
	if !errors.Is(cause, guard.ErrLost) || !errors.Is(cause, guard.ErrDeadline) || !errors.Is(cause, unreachable) {
		t.Fatalf("cause %v, want ErrLost, ErrDeadline and the renewal error", cause)
	}
}

// A renewal that the locker refuses (not merely fails) ends the lease at once.
func TestRefusedRenewalLosesAtOnce(t *testing.T) {
	f := &faulty{Locker: memlock.New()}
	refused := locks.NotHeldError("renew", "k", 1)
	f.renewErr.Store(&refused)
	clock := fakeclock.New(time.Date(1984, time.April, 4, 0, 0, 0, 0, time.UTC))
	g := newGuard(t, f, guard.Options{TTL: 30 * time.Second, Clock: guardClock{clock}})
	ctx := testCtx(t)
	lease, err := g.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := clock.BlockUntil(ctx, 2); err != nil {
		t.Fatal(err)
	}
	clock.Advance(10 * time.Second)
	select {
	case <-lease.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("refused renewal did not end the lease")
	}
	if cause := context.Cause(lease.Context()); !errors.Is(cause, locks.ErrNotHeld) || errors.Is(cause, guard.ErrDeadline) {
		t.Fatalf("cause %v, want a refusal, not a deadline", cause)
	}
	_ = lease.Release(ctx)
}

// Release while a renewal is in flight: Release must abort it and wait for
// it, and no renewal may start after Release returns — checked over many
// leases with a renewal interval short enough to race.
func TestNoRenewalAfterRelease(t *testing.T) {
	f := &faulty{Locker: memlock.New()}
	g := newGuard(t, f, guard.Options{TTL: 300 * time.Millisecond, RenewInterval: time.Millisecond})
	ctx := testCtx(t)
	for i := range 200 {
		lease, err := g.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(i%5) * time.Millisecond)
		// A loaded scheduler may starve the keep-alive past the local
		// deadline: that loss is the guard working, not the race checked.
		if err := lease.Release(ctx); err != nil && !errors.Is(err, guard.ErrDeadline) {
			t.Fatalf("Release: %v", err)
		}
		lease.Unwrap().(*faultyLease).returned.Store(true)
	}
	if f.renews.Load() == 0 {
		t.Fatal("no renewal ran: the test did not exercise the race")
	}
	if n := f.lateRenews.Load(); n != 0 {
		t.Fatalf("%d renewals started after Release returned", n)
	}

	f.renewBlocks.Store(true) // a renewal hangs on the network
	lease, err := g.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	before := f.renews.Load()
	waitFor(t, func() bool { return f.renews.Load() > before })
	start := time.Now()
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("Release with a renewal in flight: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Release waited %v for a hung renewal", d)
	}
	assertFree(t, f.Locker, "k")
}

// A renewal held back (a slow lock service that ignores cancellation) does
// not hold back the release: the lock is free for the next holder while
// the renewal is still in flight, and the renewal, once through, does not
// revive the grant.
func TestReleaseDoesNotWaitForRenewalInFlight(t *testing.T) {
	f := &faulty{Locker: memlock.New()}
	held := make(chan struct{})
	f.renewHeld.Store(&held)
	g := newGuard(t, f, guard.Options{TTL: 3 * time.Second, RenewInterval: 10 * time.Millisecond})
	ctx := testCtx(t)
	lease, err := g.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return f.renews.Load() > 0 }) // the renewal is in flight
	relErr := make(chan error, 1)
	go func() { relErr <- lease.Release(ctx) }()
	waitFor(t, func() bool { return lease.Unwrap().(*faultyLease).released.Load() })
	// The next holder gets the lock while the renewal is still held back.
	next, err := f.Locker.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatalf("lock not free with the release sent and a renewal in flight: %v", err)
	}
	select {
	case err := <-relErr:
		t.Fatalf("Release returned %v with a renewal still in flight", err)
	default:
	}
	close(held)
	if err := <-relErr; err != nil {
		t.Fatalf("Release: %v", err)
	}
	if f.renews.Load() != 1 {
		t.Errorf("%d renewals, want the one in flight only", f.renews.Load())
	}
	if _, err := f.Locker.TryAcquire(ctx, "k", time.Minute); !errors.Is(err, locks.ErrNotObtained) {
		t.Errorf("the next holder's lock after the late renewal: TryAcquire = %v, want ErrNotObtained", err)
	}
	_ = next.Release(ctx)
}

func TestAcquireRetriesTransientErrors(t *testing.T) {
	f := &faulty{Locker: memlock.New()}
	f.acquireFailures.Store(3)
	g := newGuard(t, f, guard.Options{TTL: time.Second, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	lease, err := g.Acquire(testCtx(t), "k")
	if err != nil {
		t.Fatalf("Acquire after 3 transient failures: %v", err)
	}
	_ = lease.Release(context.Background())

	// Transient failures until the context ends: the error says both.
	f.acquireFailures.Store(1 << 30)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = g.Acquire(ctx, "k")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire = %v, want DeadlineExceeded", err)
	}
}

func TestAcquireDoesNotRetryBadArguments(t *testing.T) {
	g := newGuard(t, memlock.New(), guard.Options{TTL: time.Second})
	start := time.Now()
	_, err := g.Acquire(testCtx(t), "")
	if !errors.Is(err, locks.ErrInvalidArgument) {
		t.Fatalf("Acquire(\"\") = %v, want ErrInvalidArgument", err)
	}
	if time.Since(start) > time.Second { // retrying goes on until the minute-long context ends
		t.Error("an invalid argument was retried")
	}
}

// A locker whose counter reached its ceiling fails every acquire the same
// way: the guard gives up at once instead of retrying until ctx ends.
func TestAcquireDoesNotRetryExhaustedCounter(t *testing.T) {
	var calls atomic.Int64
	l := exhausted{calls: &calls}
	g := newGuard(t, l, guard.Options{TTL: time.Second, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
	_, err := g.Acquire(testCtx(t), "k")
	var re *token.RangeError
	if !errors.As(err, &re) || !errors.Is(err, token.ErrRange) {
		t.Fatalf("Acquire = %v, want the locker's RangeError", err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the locker was asked %d times, want once", n)
	}
}

type exhausted struct{ calls *atomic.Int64 }

func (e exhausted) Acquire(context.Context, string, time.Duration) (locks.Lease, error) {
	e.calls.Add(1)
	return nil, fmt.Errorf("test locker: %w", &token.RangeError{What: "test counter", Token: math.MaxInt64, Max: math.MaxInt64})
}

func (e exhausted) TryAcquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	return e.Acquire(ctx, key, ttl)
}

func TestTryAcquire(t *testing.T) {
	ml := memlock.New()
	g := newGuard(t, ml, guard.Options{TTL: time.Second})
	ctx := testCtx(t)
	a, err := g.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	// A different context (no hold in it) must not get in.
	if _, err := g.TryAcquire(ctx, "k"); !errors.Is(err, locks.ErrNotObtained) {
		t.Fatalf("second TryAcquire = %v, want ErrNotObtained", err)
	}
}

func TestReentrancy(t *testing.T) {
	ml := memlock.New()
	g := newGuard(t, ml, guard.Options{TTL: time.Second})
	ctx := testCtx(t)
	outer, err := g.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	inner, err := g.Acquire(outer.Context(), "k")
	if err != nil {
		t.Fatalf("nested Acquire: %v", err)
	}
	if inner.Token() != outer.Token() {
		t.Fatalf("nested hold: token %d, outer token %d", inner.Token(), outer.Token())
	}
	if err := inner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	assertHeld(t, ml, "k") // only the outermost release releases

	// Do inside Do, and a different key inside: no deadlock, same token.
	err = g.Do(outer.Context(), "k", func(ctx context.Context, tok token.Token) error {
		if tok != outer.Token() {
			t.Errorf("nested Do token %d, want %d", tok, outer.Token())
		}
		return g.Do(ctx, "other", func(ctx context.Context, other token.Token) error {
			return g.Do(ctx, "k", func(_ context.Context, again token.Token) error {
				if again != outer.Token() {
					t.Errorf("Do(k) inside Do(other) inside Do(k): token %d, want %d", again, outer.Token())
				}
				return nil
			})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	assertHeld(t, ml, "k")
	assertFree(t, ml, "other")

	// Another Guard over the same locker is another holder: no re-entry.
	g2 := newGuard(t, ml, guard.Options{TTL: time.Second})
	if _, err := g2.TryAcquire(outer.Context(), "k"); !errors.Is(err, locks.ErrNotObtained) {
		t.Fatalf("another guard's TryAcquire with the hold's context = %v, want ErrNotObtained", err)
	}

	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	assertFree(t, ml, "k")
	// A context of a released hold cannot re-enter it.
	if _, err := g.Acquire(context.WithoutCancel(outer.Context()), "k"); !errors.Is(err, guard.ErrReleased) {
		t.Fatalf("Acquire with a released hold's context = %v, want ErrReleased", err)
	}
}

// The critical section learns of the loss through its context, and Do
// reports the loss even though fn only saw a cancelled context.
func TestDoReportsLoss(t *testing.T) {
	ml := memlock.New()
	g := newGuard(t, ml, guard.Options{TTL: 200 * time.Millisecond})
	err := g.Do(testCtx(t), "k", func(ctx context.Context, _ token.Token) error {
		ml.Break("k")
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), guard.ErrLost) {
			t.Errorf("fn ctx cause %v, want ErrLost", context.Cause(ctx))
		}
		return ctx.Err()
	})
	if !errors.Is(err, guard.ErrLost) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = %v, want the fn's error and ErrLost", err)
	}
}

// Do's error says whether fn's work may have taken effect: after a loss,
// fn returning nil means it may have; fn's own error is returned as is.
func TestDoSaysWhetherWorkMayHaveTakenEffect(t *testing.T) {
	ml := memlock.New()
	g := newGuard(t, ml, guard.Options{TTL: 200 * time.Millisecond})
	err := g.Do(testCtx(t), "k", func(ctx context.Context, _ token.Token) error {
		ml.Break("k")
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, guard.ErrLost) || !strings.Contains(err.Error(), "may have taken effect") {
		t.Fatalf("Do = %v, want ErrLost saying fn's work may have taken effect", err)
	}
	refused := errors.New("nothing of it committed")
	err = g.Do(testCtx(t), "k", func(ctx context.Context, _ token.Token) error {
		ml.Break("k")
		<-ctx.Done()
		return refused
	})
	if !errors.Is(err, guard.ErrLost) || !errors.Is(err, refused) || strings.Contains(err.Error(), "may have taken effect") {
		t.Fatalf("Do = %v, want fn's error and ErrLost, nothing about effect", err)
	}
}

// The contexts of a lease and of Do's fn carry the lease's end for the
// resource side: the local deadline while held, moving on with renewals,
// and a time past once released.
func TestContextsCarryLeaseEnd(t *testing.T) {
	const ttl = 300 * time.Millisecond
	g := newGuard(t, memlock.New(), guard.Options{TTL: ttl, RenewInterval: 50 * time.Millisecond})
	ctx := testCtx(t)
	lease, err := g.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	first, ok := token.Expiry(lease.Context())
	if left := time.Until(first); !ok || left <= 0 || left > ttl {
		t.Fatalf("lease context's end %v ahead (ok %v), want within the TTL %v", left, ok, ttl)
	}
	waitFor(t, func() bool { e, _ := token.Expiry(lease.Context()); return e.After(first) })
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if e, _ := token.Expiry(lease.Context()); e.After(time.Now()) {
		t.Fatalf("a released lease's end %v is ahead", time.Until(e))
	}
	err = g.Do(ctx, "k", func(ctx context.Context, _ token.Token) error {
		if e, ok := token.Expiry(ctx); !ok || !e.After(time.Now()) {
			return fmt.Errorf("fn's context: end %v ahead, ok %v", time.Until(e), ok)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestLeaseOutlivesAcquireContext(t *testing.T) {
	ml := memlock.New()
	g := newGuard(t, ml, guard.Options{TTL: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	lease, err := g.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if lease.Context().Err() != nil {
		t.Fatal("cancelling the acquire context ended the lease")
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Fatalf("second Release = %v, want nil", err)
	}
}

func TestOptionsValidation(t *testing.T) {
	ml := memlock.New()
	for _, tc := range []struct {
		name string
		o    guard.Options
	}{
		{"negative TTL", guard.Options{TTL: -time.Second}},
		{"negative drift", guard.Options{Drift: -0.1}},
		{"drift above half", guard.Options{Drift: 0.6}},
		{"renewal slower than the deadline", guard.Options{TTL: time.Second, RenewInterval: time.Second}},
		{"negative renewal", guard.Options{RenewInterval: -time.Second}},
		{"backoff inverted", guard.Options{MinBackoff: time.Second, MaxBackoff: time.Millisecond}},
	} {
		if _, err := guard.New(ml, tc.o); !errors.Is(err, locks.ErrInvalidArgument) {
			t.Errorf("%s: New = %v, want ErrInvalidArgument", tc.name, err)
		}
	}
	if _, err := guard.New(nil, guard.Options{}); !errors.Is(err, locks.ErrInvalidArgument) {
		t.Errorf("nil locker: %v", err)
	}
	if _, err := guard.New(ml, guard.Options{}); err != nil {
		t.Errorf("zero Options: %v", err)
	}
}

// lateness starts a timer of d and returns a func that waits for it and
// says how late it fired: the scheduler's own delay over the same stretch
// as the call a test times, which that test allows for on a loaded machine.
func lateness(d time.Duration) func() time.Duration {
	due := time.Now().Add(d)
	fired := make(chan time.Time, 1)
	time.AfterFunc(d, func() { fired <- time.Now() })
	return func() time.Duration { return max(0, (<-fired).Sub(due)) }
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestLogsLossAtWarn(t *testing.T) {
	ml := memlock.New()
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil))
	g := newGuard(t, ml, guard.Options{TTL: 200 * time.Millisecond, Logger: logger})
	lease, err := g.Acquire(testCtx(t), "sku:9")
	if err != nil {
		t.Fatal(err)
	}
	ml.Break("sku:9")
	<-lease.Context().Done()
	_ = lease.Release(context.Background())
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "lease lost") || !strings.Contains(out, "key=sku:9") {
		t.Fatalf("log lacks the loss at WARN:\n%s", out)
	}
	if strings.Contains(out, "acquired") {
		t.Errorf("a success was logged:\n%s", out)
	}
}

// An unreachable lock service is logged once per acquire, however many
// retries follow — also with a fixed backoff (MinBackoff == MaxBackoff).
func TestLogsUnreachableOncePerAcquire(t *testing.T) {
	f := &faulty{Locker: memlock.New()}
	f.acquireFailures.Store(5)
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil))
	g := newGuard(t, f, guard.Options{TTL: time.Second, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond, Logger: logger})
	lease, err := g.Acquire(testCtx(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	_ = lease.Release(context.Background())
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	if n := strings.Count(out, "unreachable"); n != 1 {
		t.Fatalf("%d unreachable warnings for one acquire with 5 failed tries, want 1:\n%s", n, out)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// notifying is a lease whose backend reports the loss itself.
type notifying struct {
	locks.Lease
	lost chan struct{}
}

func (n *notifying) Lost() <-chan struct{} { return n.lost }

type notifyingLocker struct {
	locks.Locker
	lost chan struct{}
}

func (l *notifyingLocker) Acquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	lease, err := l.Locker.Acquire(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return &notifying{Lease: lease, lost: l.lost}, nil
}

// A backend that reports the loss ends the lease at once, not at the next
// renewal.
func TestLossReportedByBackend(t *testing.T) {
	nl := &notifyingLocker{Locker: memlock.New(), lost: make(chan struct{})}
	g := newGuard(t, nl, guard.Options{TTL: time.Minute}) // renewals 20s apart
	lease, err := g.Acquire(testCtx(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	close(nl.lost)
	select {
	case <-lease.Context().Done():
	case <-time.After(time.Second):
		t.Fatal("the backend's loss report did not end the lease")
	}
	if cause := context.Cause(lease.Context()); !errors.Is(cause, guard.ErrLost) || !errors.Is(cause, locks.ErrNotHeld) {
		t.Fatalf("cause %v", cause)
	}
	_ = lease.Release(context.Background())
}
