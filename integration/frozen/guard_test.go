package frozen

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/token"
)

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newGuard(t *testing.T, l locks.Locker, ttl time.Duration) *guard.Guard {
	t.Helper()
	g, err := guard.New(l, guard.Options{TTL: ttl, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestGuardFrozen: the guard runtime over each backend with the
// lock service frozen (SIGSTOP) at the worst moments.
func TestGuardFrozen(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			l, srv := b.start(t)
			g := newGuard(t, l, b.ttl)
			ctx := itest.Ctx(t, 60*time.Second)
			// Warm up: a session / connection exists before the freeze.
			if err := g.Do(ctx, "warm", func(context.Context, token.Token) error { return nil }); err != nil {
				t.Fatal(err)
			}

			// Acquire and TryAcquire with the service frozen return by
			// their deadline, matching context.DeadlineExceeded.
			t.Run("Acquire", func(t *testing.T) {
				itest.Pause(t, srv)
				for _, d := range []time.Duration{50 * time.Millisecond, 300 * time.Millisecond} {
					byDeadline(t, "Acquire", d, func(ctx context.Context) error {
						l, err := g.Acquire(ctx, "a")
						if err == nil {
							l.Release(ctx)
						}
						return err
					})
					byDeadline(t, "TryAcquire", d, func(ctx context.Context) error {
						l, err := g.TryAcquire(ctx, "b")
						if err == nil {
							l.Release(ctx)
						}
						return err
					})
					byDeadline(t, "Do", d, func(ctx context.Context) error {
						return g.Do(ctx, "c", func(context.Context, token.Token) error {
							t.Error("Do ran fn with the service frozen")
							return nil
						})
					})
				}
				itest.Resume(t, srv)
			})

			// The lease context is cancelled by the lease's local deadline
			// with a cause wrapping guard.ErrLost, and Release then returns by its own
			// deadline with the loss.
			t.Run("LostByDeadline", func(t *testing.T) {
				warm(t, g)
				lease, err := g.Acquire(ctx, "lost")
				if err != nil {
					t.Fatal(err)
				}
				tm := itest.StartTiming(t)
				itest.Pause(t, srv)
				time.Sleep(20 * time.Millisecond)
				dl := lease.Deadline()
				select {
				case <-lease.Context().Done():
				case <-time.After(time.Until(dl) + 5*time.Second):
					t.Fatalf("lease context not cancelled %v after its deadline", 5*time.Second)
				}
				late := time.Since(dl)
				if allowed := tm.StopAt(dl, itest.Slack); late > allowed {
					t.Errorf("lease context cancelled %v after the lease's local deadline (allowed %v)", late, allowed)
				}
				cause := context.Cause(lease.Context())
				if !errors.Is(cause, guard.ErrLost) {
					t.Errorf("cause %v (%T), want guard.ErrLost", cause, cause)
				}
				itest.Resume(t, srv)
			})

			// Release of a lease lost while the service is still frozen
			// returns by its deadline with the loss.
			t.Run("ReleaseLost", func(t *testing.T) {
				warm(t, g)
				lease, err := g.Acquire(ctx, "lost2")
				if err != nil {
					t.Fatal(err)
				}
				itest.Pause(t, srv)
				<-lease.Context().Done()
				err = itest.ReturnsByDeadline(t, "Release of a lost lease", 300*time.Millisecond, func() { srv.Resume() }, lease.Release)
				if !errors.Is(err, guard.ErrLost) {
					t.Errorf("Release of a lost lease: %v, want ErrLost", err)
				}
				itest.Resume(t, srv)
			})

			// Do with a short parent context, the service frozen while fn
			// runs: Do returns by the parent's deadline with fn's
			// context error.
			t.Run("DoShortParent", func(t *testing.T) {
				warm(t, g)
				ran := false
				byDeadline(t, "Do (frozen inside fn)", 700*time.Millisecond, func(ctx context.Context) error {
					return g.Do(ctx, "short", func(ctx context.Context, _ token.Token) error {
						ran = true
						itest.Pause(t, srv)
						<-ctx.Done()
						return ctx.Err()
					})
				})
				if !ran {
					t.Error("fn did not run")
				}
				itest.Resume(t, srv)
			})

			// Do with a long parent context and the service frozen while
			// fn runs: fn's context ends with the loss by the lease's
			// deadline, and Do reports ErrLost even though fn returned nil.
			t.Run("DoLost", func(t *testing.T) {
				warm(t, g)
				tm := itest.StartTiming(t)
				start := time.Now()
				var fnDone time.Time
				var cause error
				// The parent's deadline bounds Do here (DoLostReturns checks
				// the bound without it).
				err := g.Do(itest.Ctx(t, b.ttl+2*time.Second), "dolost", func(fctx context.Context, _ token.Token) error {
					itest.Pause(t, srv)
					<-fctx.Done()
					fnDone = time.Now()
					cause = context.Cause(fctx)
					return nil
				})
				total, allowed := tm.Stop(b.ttl)
				t.Logf("Do returned %v after it began: %v", total, err)
				if late := fnDone.Sub(start) - b.ttl; late > allowed {
					t.Errorf("fn's context ended %v after the TTL from before the acquire (allowed %v)", late, allowed)
				}
				if !errors.Is(cause, guard.ErrLost) {
					t.Errorf("fn's context cause %v, want ErrLost", cause)
				}
				if !errors.Is(err, guard.ErrLost) {
					t.Errorf("Do: %v, want ErrLost", err)
				}
				itest.Resume(t, srv)
			})

			// The release Do makes after the loss, on a frozen service, is
			// bounded by the lock's own expiry and at least a second from its
			// start ("Deadlines and errors" in the package doc).
			t.Run("DoLostReturns", func(t *testing.T) {
				warm(t, g)
				tm := itest.StartTiming(t)
				err := itest.ReturnsByDeadline(t, "Do (lost inside fn, 15s parent)", 15*time.Second, func() { srv.Resume() }, func(ctx context.Context) error {
					return g.Do(ctx, "dolost2", func(fctx context.Context, _ token.Token) error {
						itest.Pause(t, srv)
						<-fctx.Done()
						return nil
					})
				})
				if total, allowed := tm.Stop(b.ttl + time.Second); total > b.ttl+time.Second+itest.Slack+allowed {
					t.Errorf("Do returned %v after it began (TTL %v): %v", total, b.ttl, err)
				}
				itest.Resume(t, srv)
			})

			// Release with a short context while the keep-alive's renewal is
			// in flight against the frozen service returns by that context's
			// deadline.
			t.Run("ReleaseDuringRenewal", func(t *testing.T) {
				warm(t, g)
				releaseDuringRenewal(t, g, srv, b.ttl)
			})
		})
	}
}

// warm waits (up to 20s) until g can take a lock again after a fault.
func warm(t *testing.T, g *guard.Guard) {
	t.Helper()
	if err := g.Do(itest.Ctx(t, 20*time.Second), "warm", func(context.Context, token.Token) error { return nil }); err != nil {
		t.Fatalf("warm-up after the fault: %v", err)
	}
}
