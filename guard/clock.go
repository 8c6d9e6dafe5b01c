package guard

import "time"

// Clock is the time a [Guard] runs on: when it renews and when a lease's
// local deadline passes. The default is the real clock; tests substitute
// one they can move, to make a renewal fail or a deadline pass without
// waiting for it.
//
// It is fenceguard's own small interface rather than a clock library's
// type, so that depending on the guard adds no module to a program's
// build, and any clock adapts to it in a few lines. A
// github.com/jonboulle/clockwork clock, for one, needs an adapter only
// for NewTimer and AfterFunc, whose clockwork.Timer results already have
// Timer's methods:
//
//	type clockworkClock struct{ clockwork.Clock }
//
//	func (c clockworkClock) NewTimer(d time.Duration) guard.Timer { return c.Clock.NewTimer(d) }
//	func (c clockworkClock) AfterFunc(d time.Duration, f func()) guard.Timer {
//		return c.Clock.AfterFunc(d, f)
//	}
//
// Implementations are safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that sends the time on its Chan after d.
	NewTimer(d time.Duration) Timer
	// AfterFunc returns a timer that calls f in its own goroutine after d;
	// its Chan is nil.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a [Clock]'s timer, with the methods of [time.Timer].
type Timer interface {
	Chan() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// realClock is the system clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

func (realClock) AfterFunc(d time.Duration, f func()) Timer {
	return realTimer{time.AfterFunc(d, f)}
}

type realTimer struct{ *time.Timer }

func (t realTimer) Chan() <-chan time.Time { return t.C }
