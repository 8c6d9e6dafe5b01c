package faults

import (
	"sync"
	"time"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/harness/fakeclock"
)

// stepClock is the clock a client's guard runs on: it follows the real clock
// until stopped. Stopped, it stands still — a clock stepped back, again and
// again, by as long as the fault lasts — so no timer the guard sets fires:
// not the next renewal, not the lease's local deadline, not even those set
// after a renewal that was in flight. The client believes its lease is live
// for as long as the clock stands, while the lock service counts real time.
// Started again, it jumps to the real time and fires what fell due.
type stepClock struct {
	*fakeclock.Clock

	mu      sync.Mutex // serializes moving the fake clock
	stopped bool       // guarded by mu

	stop, done chan struct{}
}

// NewTimer and AfterFunc make a stepClock a guard.Clock.
func (c *stepClock) NewTimer(d time.Duration) guard.Timer { return c.Clock.NewTimer(d) }

func (c *stepClock) AfterFunc(d time.Duration, f func()) guard.Timer {
	return c.Clock.AfterFunc(d, f)
}

// stepTick is how often the clock catches up with the real one: the
// latency it adds to the guard's timers.
const stepTick = 2 * time.Millisecond

func newStepClock() *stepClock {
	c := &stepClock{Clock: fakeclock.New(time.Now()), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		t := time.NewTicker(stepTick)
		defer t.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-t.C:
				c.catchUp()
			}
		}
	}()
	return c
}

func (c *stepClock) catchUp() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := time.Until(c.Clock.Now()); !c.stopped && d < 0 {
		c.Clock.Advance(-d)
	}
}

// Halt makes the clock stand still until Run.
func (c *stepClock) Halt() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
}

// Run makes the clock follow the real one again, jumping to it at once.
func (c *stepClock) Run() {
	c.mu.Lock()
	c.stopped = false
	c.mu.Unlock()
	c.catchUp()
}

// Close stops following the real clock.
func (c *stepClock) Close() {
	close(c.stop)
	<-c.done
}
