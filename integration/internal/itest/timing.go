package itest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// Slack is how long past its deadline a call may return on an idle
// machine: the wake-ups between a context's timer and the call's return.
const Slack = 250 * time.Millisecond

// lagTick is how often a Timing's watcher wakes to see how late it runs.
const lagTick = 2 * time.Millisecond

// lagFactor is how many scheduling delays a return may take: the context's
// timer, the goroutine waiting on the connection, the caller.
const lagFactor = 3

// Timing times a call against its deadline on a machine that may be busy.
// While it runs, a goroutine sleeps lagTick at a time and records how late
// it wakes: the lateness the scheduler shows this process at that moment.
// A return past the deadline by Slack plus lagFactor times the largest such
// lateness is late; on an idle machine that is Slack.
type Timing struct {
	start time.Time
	stop  chan struct{}
	done  chan struct{}
	lag   atomic.Int64 // largest lateness seen, in ns
}

// StartTiming starts timing a call.
func StartTiming() *Timing {
	tm := &Timing{start: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	go tm.watch()
	return tm
}

func (tm *Timing) watch() {
	defer close(tm.done)
	timer := time.NewTimer(lagTick)
	defer timer.Stop()
	for {
		before := time.Now()
		timer.Reset(lagTick)
		select {
		case <-tm.stop:
			return
		case <-timer.C:
		}
		if late := time.Since(before) - lagTick; late > time.Duration(tm.lag.Load()) {
			tm.lag.Store(int64(late))
		}
	}
}

// Stop ends the timing. It returns how long the call took since
// StartTiming and how late past its deadline it may return: Slack plus the
// scheduler's lateness seen meanwhile. Stop may be called once.
func (tm *Timing) Stop() (took, allowed time.Duration) { return tm.StopAllowing(Slack) }

// StopAllowing is Stop for a call that may take base on an idle machine:
// allowed is base plus the scheduler's lateness seen meanwhile.
func (tm *Timing) StopAllowing(base time.Duration) (took, allowed time.Duration) {
	took = time.Since(tm.start)
	close(tm.stop)
	<-tm.done
	return took, base + lagFactor*time.Duration(tm.lag.Load())
}

// ReturnsByDeadline runs f with a context ending after d and checks that it
// returns by the deadline (see Timing). When f has not returned 3s after
// the deadline, it reports that, calls unstick (which thaws the service)
// and waits for f.
func ReturnsByDeadline(t testing.TB, what string, d time.Duration, unstick func(), f func(ctx context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	tm := StartTiming()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(d + 3*time.Second):
		t.Errorf("%s: not returned %v after a %v deadline: thawing the service", what, time.Since(start), d)
		unstick()
		err = <-done
		t.Logf("%s: returned %v after its start, once the service was thawed: %v", what, time.Since(start), err)
		tm.Stop()
		return err
	}
	if took, allowed := tm.Stop(); took > d+allowed {
		t.Errorf("%s: returned %v after a %v deadline (allowed %v late): %v", what, took, d, allowed, err)
	}
	return err
}
