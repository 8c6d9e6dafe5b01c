package frozen

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks"
)

// parallel is how many tests run at once unless -test.parallel says
// otherwise. They spend their time waiting for timeouts of frozen servers,
// each test on servers of its own, not on the CPU: go test's default of
// GOMAXPROCS would leave a 2-core machine mostly idle.
const parallel = 6

func TestMain(m *testing.M) {
	harness.DefaultParallel(parallel)
	itest.Main(m)
}

// byDeadline runs f with a context that ends after d and checks that f
// returns by that deadline (allowing for the scheduler's lateness, see
// itest.Timing) with an error matching context.DeadlineExceeded. It
// returns f's error.
func byDeadline(t *testing.T, what string, d time.Duration, f func(ctx context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	tm := itest.StartTiming(t)
	err := f(ctx)
	ended := ctx.Err() != nil
	took, allowed := tm.Stop(d)
	if took > d+allowed {
		t.Errorf("%s: returned %v after a %v deadline (more than %v late): %v", what, took, d, allowed, err)
	}
	if !ended && err != nil {
		// The call failed on its own (a connection found broken) before
		// the context ended: its error need not be the context's.
		return err
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%s: err = %v (%T), want it to match context.DeadlineExceeded", what, err, err)
	}
	return err
}

// byCancel is byDeadline for a context cancelled (not timed out) after d.
func byCancel(t *testing.T, what string, d time.Duration, f func(ctx context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	timer := time.AfterFunc(d, cancel)
	defer timer.Stop()
	tm := itest.StartTiming(t)
	err := f(ctx)
	ended := ctx.Err() != nil
	took, allowed := tm.Stop(d)
	if took > d+allowed {
		t.Errorf("%s: returned %v after a cancel at %v (more than %v late): %v", what, took, d, allowed, err)
	}
	if !ended && err != nil {
		return err // failed on its own before the cancel
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("%s: err = %v (%T), want it to match context.Canceled", what, err, err)
	}
	return err
}

// deadlines are the deadlines the frozen-server tests try each call with:
// short and long, so go-redis's socket deadline and the context's timer
// race at several points.
var deadlines = []time.Duration{30 * time.Millisecond, 120 * time.Millisecond, 300 * time.Millisecond}

func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newRenewingGuard is a Guard on l that renews every every.
func newRenewingGuard(t *testing.T, l locks.Locker, ttl, every time.Duration) *guard.Guard {
	t.Helper()
	g, err := guard.New(l, guard.Options{TTL: ttl, RenewInterval: every, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	return g
}
