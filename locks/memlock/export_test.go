package memlock

import (
	"context"
	"time"

	"github.com/fenceguard/fenceguard/token"
)

// The points of Acquire's wait at which a hook set by SetHook runs.
const (
	WaitHook  = waitHook
	GrantHook = grantHook
)

// SetLast sets the counter as if l had last issued t, so that tests reach
// the ceiling without 2^63 grants.
func SetLast(l *Locker, t token.Token) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last = t
}

// SetClock makes l read the time from now: grants, expiry and renewals.
// The waiters' timers still run on the real clock, so with a clock that
// only moves when told, a lease expires only when something looks at it.
// Call it before first use.
func SetClock(l *Locker, now func() time.Time) { l.clock = now }

// SetHook makes every waiting Acquire call hook(ctx, at) with its own
// context: at WaitHook before each wait, and at GrantHook after it took a
// grant from its channel, before checking it. A hook that blocks stands for
// a goroutine that is not scheduled. Call it before first use.
func SetHook(l *Locker, hook func(ctx context.Context, at string)) { l.hook = hook }

// Len returns the number of keys l holds or has waiters for.
func Len(l *Locker) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}
