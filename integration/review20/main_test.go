package review20

import (
	"context"
	"errors"
	"flag"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/internal/servers"
)

var defects = flag.Bool("review20.defects", false, "run the tests of review 20's findings that are not fixed yet")

// defect skips a test of a finding not fixed yet unless -review20.defects
// is given.
func defect(t *testing.T, finding string) {
	t.Helper()
	if !*defects {
		t.Skipf("review20 finding (run with -args -review20.defects): %s", finding)
	}
}

var _ = defect

func TestMain(m *testing.M) { servers.Main(m) }

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quietRedis{}) }

// slack is how long past its context's deadline a call may take to return.
const slack = 250 * time.Millisecond

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// byDeadline runs f with a context that ends after d and checks that f
// returns within slack of that deadline with an error matching
// context.DeadlineExceeded. It returns f's error.
func byDeadline(t *testing.T, what string, d time.Duration, f func(ctx context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	err := f(ctx)
	ended := ctx.Err() != nil
	took := time.Since(start)
	if took > d+slack {
		t.Errorf("%s: returned %v after a %v deadline (more than %v late): %v", what, took, d, slack, err)
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
	tm := time.AfterFunc(d, cancel)
	defer tm.Stop()
	start := time.Now()
	err := f(ctx)
	ended := ctx.Err() != nil
	took := time.Since(start)
	if took > d+slack {
		t.Errorf("%s: returned %v after a cancel at %v (more than %v late): %v", what, took, d, slack, err)
	}
	if !ended && err != nil {
		return err // failed on its own before the cancel
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("%s: err = %v (%T), want it to match context.Canceled", what, err, err)
	}
	return err
}

// pause freezes s and thaws it when the test ends (and before the harness
// tears it down).
func pause(t *testing.T, s *servers.Server) {
	t.Helper()
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Resume() })
}

func resume(t *testing.T, s *servers.Server) {
	t.Helper()
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
}

// deadlines are the deadlines the frozen-server tests try each call with:
// short and long, so go-redis's socket deadline and the context's timer
// race at several points.
var deadlines = []time.Duration{30 * time.Millisecond, 120 * time.Millisecond, 300 * time.Millisecond}
