package grpcmw

import "time"

// SetLogClock sets the clock a RefusalLog's windows are measured by.
func SetLogClock(l *RefusalLog, now func() time.Time) { l.now = now }

// KeysHeld returns the number of keys held or waited for in i's per-key
// mutex table.
func KeysHeld(i *Interceptor) int { return i.locks.len() }

// ErrNotClaimed is what SendMsg returns on a stream whose key comes from
// its first message before that message was claimed.
var ErrNotClaimed = errNotClaimed
