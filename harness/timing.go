package harness

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// WaitFor calls cond every tick until it returns nil, and returns nil then;
// when ctx ends first it returns cond's last error together with the
// context's cause. Use it to wait for a consequence (a clean-up, a
// failover) that has no event to wait on, bounded by ctx.
func WaitFor(ctx context.Context, tick time.Duration, cond func(context.Context) error) error {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		err := cond(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", context.Cause(ctx), err)
		case <-t.C:
		}
	}
}

// Eventually is WaitFor for a test: it waits up to timeout for cond to
// return nil, polling every 10 ms, and fails t with cond's last error when
// it does not. The timeout is stretched by the scheduling lateness the test
// process showed meanwhile (see [Lateness]): on a loaded machine a
// condition that holds "within 2 s" of CPU time may need longer on the
// wall clock.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	lat := StartLateness(t)
	defer lat.Stop()
	start := time.Now()
	var last error
	for {
		if last = cond(); last == nil {
			return
		}
		if time.Since(start) > timeout+lat.Since(start) {
			t.Fatalf("harness: condition not met within %v (+%v of scheduling lateness): %v", timeout, lat.Since(start), last)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Lateness measures how late the test process gets to run: a goroutine
// asks to wake every millisecond and records how much later than asked it
// did. On an idle machine that is well under a millisecond; on a loaded one
// (other test binaries, -race, two cores) stalls of hundreds of
// milliseconds happen, and a check that "a call returned within D" fails
// though the code under test did nothing wrong.
//
// A timing check therefore allows for the stalls observed while it waited:
//
//	lat := harness.StartLateness(t)
//	deadline := time.Now().Add(500 * time.Millisecond)
//	err := callWith(deadline)
//	if late := time.Since(deadline); late > lat.Allowance(250*time.Millisecond, deadline) {
//		t.Errorf("returned %v after its deadline", late)
//	}
//
// A stall before the deadline delays the call's timers and its return alike;
// a stall after the deadline delays only the return, so only those count.
//
// The measuring goroutine sees only its own wake-ups: on a loaded machine
// the threads running the call's work after the deadline may wait for a CPU
// while it happens to run. Where the kernel says (Linux schedstats),
// Lateness therefore also samples how long the process's threads have, in
// all, been runnable but not running, and counts whichever of the two is
// larger after the deadline. On an idle machine both stay near zero.
//
// Lateness is safe for concurrent use; Stop (or the end of t) ends the
// measuring goroutine.
type Lateness struct {
	stop chan struct{}
	done chan struct{}
	once sync.Once

	mu      sync.Mutex
	stalls  []stall   // guarded by mu; at most maxStalls, oldest dropped
	delays  []delay   // guarded by mu; at most maxStalls, oldest dropped
	want    time.Time // guarded by mu; when the goroutine asked to wake next
	stopped bool      // guarded by mu
}

// stall is a wake-up that came later than asked: the process could not run
// during [from, to].
type stall struct{ from, to time.Time }

// delay is a sample of runDelay: by at, the process's threads had waited
// total for a CPU.
type delay struct {
	at    time.Time
	total time.Duration
}

const (
	latenessTick = time.Millisecond
	// latenessFloor is the lateness below which a wake-up is not recorded:
	// timer slack, not a stall.
	latenessFloor = 2 * time.Millisecond
	maxStalls     = 4096
	// delayEvery is how many ticks apart runDelay is sampled: often enough
	// that a deadline falls near a sample, seldom enough to cost little.
	delayEvery = 10
)

// StartLateness starts measuring the process's scheduling lateness until
// Stop or the end of t.
func StartLateness(t testing.TB) *Lateness {
	l := &Lateness{stop: make(chan struct{}), done: make(chan struct{}), want: time.Now().Add(latenessTick)}
	l.sampleDelay()
	go l.run()
	t.Cleanup(l.Stop)
	return l
}

func (l *Lateness) run() {
	defer close(l.done)
	timer := time.NewTimer(latenessTick)
	defer timer.Stop()
	for n := 1; ; n++ {
		if n%delayEvery == 0 {
			l.sampleDelay()
		}
		select {
		case <-l.stop:
			l.sampleDelay()
			l.mu.Lock()
			l.stopped = true
			l.mu.Unlock()
			return
		case <-timer.C:
			now := time.Now() // the channel's time is when the timer fired, not when we ran
			l.mu.Lock()
			if now.Sub(l.want) > latenessFloor {
				if len(l.stalls) == maxStalls {
					l.stalls = l.stalls[1:]
				}
				l.stalls = append(l.stalls, stall{from: l.want, to: now})
			}
			l.want = now.Add(latenessTick)
			l.mu.Unlock()
			timer.Reset(latenessTick)
		}
	}
}

// readRunDelay is runDelay; tests replace it.
var readRunDelay = runDelay

// sampleDelay records the process's run-queue delay so far, where known.
func (l *Lateness) sampleDelay() {
	total, ok := readRunDelay()
	if !ok {
		return
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.delays) == maxStalls {
		l.delays = l.delays[1:]
	}
	l.delays = append(l.delays, delay{at: now, total: total})
}

// delayedSince returns how long the process's threads waited for a CPU, in
// all, since the last sample at or before t (the first sample when none
// is), up to now or the last sample once stopped. l.mu must be held.
func (l *Lateness) delayedSince(t time.Time, now delay) time.Duration {
	if len(l.delays) == 0 {
		return 0
	}
	from := l.delays[0]
	for _, d := range l.delays {
		if d.at.After(t) {
			break
		}
		from = d
	}
	return max(0, now.total-from.total)
}

// Stop ends the measurement; the stalls recorded so far stay readable.
func (l *Lateness) Stop() {
	l.once.Do(func() { close(l.stop) })
	<-l.done
}

// Since returns the total time the process was stalled after t (the parts
// of stalls before t do not count), a stall still under way included: the
// measuring goroutine not having run yet counts from when it should have.
// Where the kernel reports it, the time the process's threads waited for
// a CPU after t (from the sample before t) counts instead when it is
// larger.
func (l *Lateness) Since(t time.Time) time.Duration {
	cur, curOK := delay{}, false
	if total, ok := readRunDelay(); ok {
		cur, curOK = delay{at: time.Now(), total: total}, true
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	var sum time.Duration
	if from := later(l.want, t); !l.stopped && now.Sub(l.want) > latenessFloor && now.After(from) {
		sum += now.Sub(from)
	}
	for _, s := range l.stalls {
		if s.to.Before(t) {
			continue
		}
		sum += s.to.Sub(later(s.from, t))
	}
	if l.stopped || !curOK {
		if len(l.delays) == 0 {
			return sum
		}
		cur = l.delays[len(l.delays)-1]
	}
	return max(sum, l.delayedSince(t, cur))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Max returns the longest stall recorded.
func (l *Lateness) Max() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var m time.Duration
	for _, s := range l.stalls {
		m = max(m, s.to.Sub(s.from))
	}
	return m
}

// Allowance returns base plus the time the process was stalled after
// deadline: how late past deadline a call may return before that is the
// code's fault rather than the scheduler's.
func (l *Lateness) Allowance(base time.Duration, deadline time.Time) time.Duration {
	return base + l.Since(deadline)
}

// ReturnsAtCancel runs each call with a context that is cancelled after
// the given delay and fails t for each one that does not return with an
// error matching context.Canceled within slack of the cancel (plus the
// stalls [Lateness] measured after it). Use it to check that calls
// against a paused or blackholed server honour a cancel without a
// deadline.
func ReturnsAtCancel(t testing.TB, after, slack time.Duration, calls map[string]func(context.Context) error) {
	t.Helper()
	for name, call := range calls {
		ctx, cancel := context.WithCancel(context.Background())
		lat := StartLateness(t)
		start := time.Now()
		timer := time.AfterFunc(after, cancel)
		err := call(ctx)
		late := time.Since(start) - after
		allowed := lat.Allowance(slack, start.Add(after))
		timer.Stop()
		cancel()
		lat.Stop()
		if late > allowed {
			t.Errorf("%s returned %v after its cancel, want under %v", name, late, allowed)
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s, cancelled: %v, want an error matching context.Canceled", name, err)
		}
	}
}
