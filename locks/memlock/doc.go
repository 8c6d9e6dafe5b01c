// Package memlock is the in-process [locks.Locker]: locks shared by the
// goroutines of one process. Use it in tests, for resources that live in one
// process, and as the default where no lock service is configured.
//
// # Tokens
//
// One counter per Locker feeds every key: a grant's token is
// max(last token + 1, wall clock in microseconds since 1970). Tokens
// therefore strictly increase for each key — and across keys, which is more
// than fencing needs. The clock floor is what makes a restarted process
// safe: its first token is above every token the previous process issued,
// unless the clock was stepped back by more than the time the restart took
// (or the old process issued more than a million grants a second for long
// enough to run ahead of the clock). Expiry and waiting use the monotonic
// clock and are not affected by clock steps.
//
// # Waiting
//
// Waiters are served first come, first served: a release hands the lock to
// the longest-waiting acquirer directly, and waiters also wake when the
// holder's lease expires. A cancelled waiter leaves the queue.
//
// # Memory
//
// A key costs memory only while it is held or waited for; the entry is
// deleted when the lock is released with nobody waiting, so idle keys do not
// accumulate. (A lease that expires without a release keeps its entry until
// the key is next used.)
package memlock
