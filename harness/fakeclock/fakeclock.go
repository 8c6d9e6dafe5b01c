// Package fakeclock is a clock for tests that moves only when told to: its
// timers fire when [Clock.Advance] passes their time.
//
// It has the methods of guard.Clock, with *[Timer] in place of guard.Timer
// (so that it depends on no fenceguard package); adapt it in a test as
// guard's documentation shows for any clock:
//
//	type clock struct{ *fakeclock.Clock }
//
//	func (c clock) NewTimer(d time.Duration) guard.Timer { return c.Clock.NewTimer(d) }
//	func (c clock) AfterFunc(d time.Duration, f func()) guard.Timer {
//		return c.Clock.AfterFunc(d, f)
//	}
package fakeclock

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Clock is a fake clock. It is safe for concurrent use. The zero Clock is
// not usable: make one with [New].
type Clock struct {
	mu      sync.Mutex
	now     time.Time     // guarded by mu
	timers  []*Timer      // guarded by mu; pending, in no particular order
	changed chan struct{} // guarded by mu; closed and replaced when timers change
}

// New returns a clock standing at t.
func New(t time.Time) *Clock {
	return &Clock{now: t, changed: make(chan struct{})}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that sends the clock's time on its channel once
// the clock has advanced d.
func (c *Clock) NewTimer(d time.Duration) *Timer {
	t := &Timer{c: c, ch: make(chan time.Time, 1)}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scheduleLocked(t, d)
	return t
}

// AfterFunc returns a timer that calls f, in a goroutine of its own, once
// the clock has advanced d.
func (c *Clock) AfterFunc(d time.Duration, f func()) *Timer {
	t := &Timer{c: c, fn: f}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scheduleLocked(t, d)
	return t
}

func (c *Clock) scheduleLocked(t *Timer, d time.Duration) {
	t.at = c.now.Add(d)
	t.pending = true
	c.timers = append(c.timers, t)
	c.notifyLocked()
	if d <= 0 {
		c.fireDueLocked()
	}
}

func (c *Clock) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Advance moves the clock forward by d and fires, in time order, every
// timer that falls due.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.fireDueLocked()
}

func (c *Clock) fireDueLocked() {
	sort.SliceStable(c.timers, func(i, j int) bool { return c.timers[i].at.Before(c.timers[j].at) })
	kept := c.timers[:0]
	fired := false
	for _, t := range c.timers {
		if t.at.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.pending = false
		fired = true
		if t.fn != nil {
			go t.fn()
		} else {
			select {
			case t.ch <- c.now:
			default: // an unread earlier tick: like time.Timer, keep one
			}
		}
	}
	for i := len(kept); i < len(c.timers); i++ {
		c.timers[i] = nil
	}
	c.timers = kept
	if fired {
		c.notifyLocked()
	}
}

// Waiters returns the number of pending timers.
func (c *Clock) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// BlockUntil waits until at least n timers are pending, or ctx ends.
func (c *Clock) BlockUntil(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		got, changed := len(c.timers), c.changed
		c.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Timer is a timer of a Clock, with the methods of guard.Timer.
type Timer struct {
	c  *Clock
	ch chan time.Time // nil for AfterFunc timers
	fn func()

	at      time.Time // guarded by c.mu
	pending bool      // guarded by c.mu
}

// Chan returns the channel the timer sends on; nil for an AfterFunc timer.
func (t *Timer) Chan() <-chan time.Time { return t.ch }

// Stop stops the timer and reports whether it was pending.
func (t *Timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.pending
	t.removeLocked()
	return was
}

// Reset makes the timer fire once the clock has advanced d from now, and
// reports whether it was pending.
func (t *Timer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.pending
	t.removeLocked()
	t.c.scheduleLocked(t, d)
	return was
}

func (t *Timer) removeLocked() {
	if !t.pending {
		return
	}
	t.pending = false
	for i, o := range t.c.timers {
		if o == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			break
		}
	}
	t.c.notifyLocked()
}
