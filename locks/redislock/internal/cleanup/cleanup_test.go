package cleanup_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fenceguard/fenceguard/locks/redislock/internal/cleanup"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A clean-up slower than the caller's context: Run returns about Wait
// after the context ended, the clean-up goes on, and Close waits for it.
func TestRunReturnsAtTheDeadline(t *testing.T) {
	var g cleanup.Group
	var finished atomic.Bool
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	g.Run(ctx, func(ctx context.Context) {
		select {
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
		}
		finished.Store(true)
	})
	if d := time.Since(start); d > 50*time.Millisecond+cleanup.Wait+100*time.Millisecond {
		t.Errorf("Run returned after %v, want about 100ms", d)
	}
	if finished.Load() {
		t.Error("the clean-up finished before Run returned: it did not run in the background")
	}
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
