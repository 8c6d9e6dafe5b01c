package httpmw

import "time"

// LockedKeys returns how many keys m's per-key serialization holds entries
// for: those held or waited for.
func LockedKeys(m *Middleware) int {
	if m.locks == nil {
		return 0
	}
	return m.locks.len()
}

// SetLogClock makes l read the time from now.
func SetLogClock(l *RefusalLog, now func() time.Time) { l.now = now }
