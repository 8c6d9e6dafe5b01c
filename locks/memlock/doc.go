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
// clock and are not affected by clock steps. A clock before 1970 floors
// nothing.
//
// The counter is exact over its whole range and stops at [token.MaxInt64]
// (2^63−1, so every token fits a signed 64-bit column): a grant past it is
// refused with an error wrapping a [*token.RangeError] — never a token
// that wraps around below earlier ones. The clock floor stays far below
// the ceiling; the Locker cannot be healed, so only a counter run ahead of
// the clock by centuries could reach it.
//
// [Locker.Issued] is exactly the last token issued, for any key.
//
// # Forged tokens
//
// [Locker.Current] implements [token.Sequencer] for [token.SequencerCheck]:
// the token of the key's current holder, or, while the key is free, the
// last token issued. A resource that checks tokens against it refuses
// every token above the current holder's — waiters have no token until
// they are handed the lock — so a client that makes tokens up can at most
// act as the current holder. [token.ClockBound] alone lets a made-up token
// up to five minutes ahead of the clock through; combine both with
// [token.All]:
//
//	check := token.All(token.ClockBound{}, token.SequencerCheck(locker, token.SequencerOptions{}))
//
// # Waiting
//
// Waiters are served first come, first served: a release hands the lock to
// the longest-waiting acquirer directly, and waiters also wake when the
// holder's lease expires. A cancelled waiter leaves the queue. A waiter
// scheduled only after the grant handed to it ran out queues again rather
// than return it, so no hand-over makes a second holder.
//
// # Lock-delay
//
// A Locker built by [NewWithOptions] with [Options].LockDelay keeps a key
// whose lease expired unreleased from every other acquirer — waiters
// already queued included — for the delay past the lease's Deadline; a
// Release hands it over at once, and the waiters still wake by the
// hand-over or the expiry, in their order. Within the delay the expired
// grant is still the holder: its Renew and Release succeed. Break and
// TakeOver, a test's hand on the lock, ignore the delay. What the delay
// buys and what it does not: package locks, "Lock-delay".
//
// # Testing
//
// A Locker, a guard.Guard over it and a [token.MemoryFence] let a unit
// test drive what a holder must survive, deterministically, with no lock
// service and no sleeps (the runnable example shows both as tests):
//
//   - The lease lost in the middle of the critical section:
//     [Locker.Break] the key from inside it (from a fake the code under
//     test calls). The lease's [Lease.Lost] channel closes before Break
//     returns, so the guard cancels the context it gave fn without
//     waiting for a renewal; wait for that context's Done, or call
//     synctest.Wait under testing/synctest, before the code goes on.
//   - The token refused: [Locker.TakeOver] the key and claim the fence
//     with the new lease's token, as the next holder would while the
//     code under test was paused. The code is told nothing and goes on
//     with its old token; its next claim fails with a [*token.StaleError].
//
// A refusal of another kind — a token refused as forged, or the store
// unreachable — is a fence whose Check says so:
// token.MemoryFence{Check: token.CheckFunc(...)}.
//
// Under testing/synctest (Go 1.25+), a Locker and a guard created in the
// bubble run on its clock: leases expire and renew in fake time, so a
// time.Sleep of the renewal interval reaches the guard's next renewal at
// once.
//
// # Memory
//
// A key costs memory only while it is held or waited for; the entry is
// deleted when the lock is released with nobody waiting, so idle keys do not
// accumulate. A lease that expires without a release keeps its entry until
// the key is next used or a sweep finds it: every new entry first expires
// the holders of two others, so that keys abandoned by their holders are
// removed as other keys are used (at most about as many expired entries
// stay as unexpired ones).
package memlock
