package itest

import (
	"context"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness"
)

// Slack is how long past its deadline a call may return on an idle
// machine: the wake-ups between a context's timer and the call's return.
const Slack = 250 * time.Millisecond

// Timing times a call against its deadline on a machine that may be busy.
// It measures the process's stalls meanwhile (harness.Lateness): a call
// may return past its deadline by a base allowance (Slack) plus the time
// the process could not run after the deadline, so a check holds on a
// loaded machine and is as strict as a fixed allowance on an idle one.
type Timing struct {
	start time.Time
	lat   *harness.Lateness
}

// StartTiming starts timing a call.
func StartTiming(t testing.TB) *Timing {
	return &Timing{start: time.Now(), lat: harness.StartLateness(t)}
}

// Stop ends the timing of a call whose deadline was d after StartTiming.
// It returns how long the call took and how late past its deadline it may
// return: Slack plus the stalls after the deadline.
func (tm *Timing) Stop(d time.Duration) (took, allowed time.Duration) {
	return tm.StopAllowing(Slack, d)
}

// StopAllowing is Stop with base in place of Slack.
func (tm *Timing) StopAllowing(base, d time.Duration) (took, allowed time.Duration) {
	took = time.Since(tm.start)
	return took, tm.StopAt(tm.start.Add(d), base)
}

// StopAt ends the timing of a call due by deadline and returns how late
// past it the call may return: base plus the stalls after deadline.
func (tm *Timing) StopAt(deadline time.Time, base time.Duration) (allowed time.Duration) {
	tm.lat.Stop()
	return tm.lat.Allowance(base, deadline)
}

// ReturnsByDeadline runs f with a context ending after d and checks that it
// returns by the deadline (see Timing). When f has not returned 3s after
// the deadline, it reports that, calls unstick (which thaws the service)
// and waits for f.
func ReturnsByDeadline(t testing.TB, what string, d time.Duration, unstick func(), f func(ctx context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	tm := StartTiming(t)
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
		tm.Stop(d)
		return err
	}
	if took, allowed := tm.Stop(d); took > d+allowed {
		t.Errorf("%s: returned %v after a %v deadline (allowed %v late): %v", what, took, d, allowed, err)
	}
	return err
}
