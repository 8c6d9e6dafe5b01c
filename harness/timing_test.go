package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"
)

func TestWaitForPollsUntilCondHolds(t *testing.T) {
	var n atomic.Int32
	err := WaitFor(context.Background(), time.Millisecond, func(context.Context) error {
		if n.Add(1) < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || n.Load() != 3 {
		t.Fatalf("WaitFor = %v after %d calls; want nil after 3", err, n.Load())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err = WaitFor(ctx, time.Millisecond, func(context.Context) error { return errors.New("never") })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitFor past its context = %v; want DeadlineExceeded", err)
	}
}

// A stall of the whole process after the deadline shows up in the
// allowance; a stall before it does not.
func TestLatenessAllowanceCountsStallsAfterDeadline(t *testing.T) {
	// Only the wake-ups: the threads' run-queue delay, which a loaded
	// machine adds after the deadline, is checked below.
	noRunDelay(t)
	lat := StartLateness(t)
	// The whole process stops, as when the machine is overloaded: SIGSTOP,
	// and a shell sends SIGCONT after d.
	stallFor := func(d time.Duration) {
		t.Helper()
		cont := exec.Command("sh", "-c", fmt.Sprintf("sleep %.3f; kill -CONT %d", d.Seconds(), os.Getpid()))
		if err := cont.Start(); err != nil {
			t.Fatal(err)
		}
		kill(os.Getpid(), sigStop)
		cont.Wait()
	}
	stallFor(150 * time.Millisecond)
	deadline := time.Now()
	time.Sleep(20 * time.Millisecond)
	stallFor(200 * time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	lat.Stop()

	got := lat.Allowance(50*time.Millisecond, deadline)
	if got < 50*time.Millisecond+150*time.Millisecond {
		t.Errorf("Allowance = %v; want at least base 50ms + most of the 200ms stall after the deadline", got)
	}
	if got > 50*time.Millisecond+200*time.Millisecond+150*time.Millisecond {
		t.Errorf("Allowance = %v; the 150ms stall before the deadline was counted", got)
	}
	if lat.Max() < 150*time.Millisecond {
		t.Errorf("Max = %v; want the 200ms stall", lat.Max())
	}
}

func noRunDelay(t *testing.T) {
	old := readRunDelay
	readRunDelay = func() (time.Duration, bool) { return 0, false }
	t.Cleanup(func() { readRunDelay = old })
}

// Time the process's threads waited for a CPU after the deadline counts in
// the allowance though the measuring goroutine itself ran on time; the
// wait before the deadline does not.
func TestLatenessAllowanceCountsRunQueueDelayAfterDeadline(t *testing.T) {
	var waited atomic.Int64
	old := readRunDelay
	readRunDelay = func() (time.Duration, bool) { return time.Duration(waited.Load()), true }
	t.Cleanup(func() { readRunDelay = old })

	lat := StartLateness(t)
	waited.Add(int64(300 * time.Millisecond)) // before the deadline
	time.Sleep(30 * time.Millisecond)         // a sample of it is taken
	deadline := time.Now()
	time.Sleep(30 * time.Millisecond)
	waited.Add(int64(400 * time.Millisecond)) // after it
	time.Sleep(30 * time.Millisecond)
	lat.Stop()

	got := lat.Allowance(50*time.Millisecond, deadline)
	if got < 450*time.Millisecond {
		t.Errorf("Allowance = %v; want base 50ms + the 400ms waited after the deadline", got)
	}
	if got >= 750*time.Millisecond {
		t.Errorf("Allowance = %v; the 300ms waited before the deadline was counted", got)
	}
}
