package cleanup_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fenceguard/fenceguard/harness"

	"github.com/fenceguard/fenceguard/locks/etcdlock/internal/cleanup"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A clean-up slower than the caller's context: Run returns about Wait
// after the context ended, the clean-up goes on, and Close waits for it.
func TestRunReturnsAtTheDeadline(t *testing.T) {
	var g cleanup.Group
	var finished atomic.Bool
	proceed := make(chan struct{}) // the clean-up ends only when told
	const d = 50 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	// A timer of the same length as the wait Run should take: how late it
	// fires is the scheduler's own delay, allowed for on a loaded machine,
	// as are the process's stalls after it is due (the goroutines that end
	// Run may wait for a CPU while the timer's does not).
	lat := harness.StartLateness(t)
	due := time.Now().Add(d + cleanup.Wait)
	fired := make(chan time.Time, 1)
	time.AfterFunc(d+cleanup.Wait, func() { fired <- time.Now() })
	g.Run(ctx, func(context.Context) {
		<-proceed
		finished.Store(true)
	})
	returned := time.Now()
	if finished.Load() {
		t.Error("the clean-up finished before Run returned: it did not run in the background")
	}
	lat.Stop()
	late, sched := returned.Sub(due), max(0, (<-fired).Sub(due), lat.Since(due))
	if allowed := 100*time.Millisecond + sched; late > allowed {
		t.Errorf("Run returned %v after its context's deadline and the wait, want within %v", late, allowed)
	}
	close(proceed)
	g.Close()
	if !finished.Load() {
		t.Error("Close returned before the clean-up finished")
	}
}

// A clean-up's own context is bounded by Timeout, whatever the caller's.
func TestRunBoundsTheCleanUp(t *testing.T) {
	var g cleanup.Group
	defer g.Close()
	var left time.Duration
	g.Run(context.Background(), func(ctx context.Context) {
		dl, ok := ctx.Deadline()
		if !ok {
			t.Error("the clean-up's context has no deadline")
		}
		left = time.Until(dl)
	})
	if left <= 0 || left > cleanup.Timeout {
		t.Errorf("the clean-up had %v, want at most %v", left, cleanup.Timeout)
	}
}

// After Close, Run runs the clean-up before returning.
func TestRunAfterClose(t *testing.T) {
	var g cleanup.Group
	g.Close()
	g.Close() // idempotent
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	g.Run(ctx, func(context.Context) { ran = true })
	if !ran {
		t.Error("Run after Close returned without running the clean-up")
	}
}
