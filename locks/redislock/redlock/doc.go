// Package redlock runs the Redlock algorithm over N independent Redis
// nodes and hands out fencing tokens that grow with every grant, which
// Redlock alone cannot do.
//
// The nodes are independent servers (not replicas of one another), 3 or
// 5, running Redis 6.0 or later; use one go-redis client per node (with
// go-redis v9.16 or later, set DialerRetries: 1 on it, or every call to a
// dead node waits out five dials):
//
//	locker, err := redlock.New([]redlock.Client{n1, n2, n3, n4, n5}, redlock.Options{})
//	...
//	defer locker.Close()
//	lease, err := locker.Acquire(ctx, "job:report", 10*time.Second)
//	...
//	defer lease.Release(ctx)
//	err = fence.Claim(ctx, "report:2026-11-29", lease.Token())
//
// A [Locker] is safe for concurrent use; Close it when done (it holds one
// pub/sub connection per node for waiters). A [Sequencer] holds nothing.
//
// # Locks and leases
//
// An acquire takes the lock on a majority of the nodes (N/2+1) within the
// lease's validity, TTL minus the time taken and a drift allowance
// ([Options].DriftFactor, DriftMin); otherwise it gives back what it took.
// Each node call is bounded by [Options].NodeTimeout. Renew extends the
// lock where this grant still holds it and needs a majority; Release
// frees it and wakes waiters, which try again (a wake-up is only a hint:
// every lease comes out of a complete attempt). A lease's Deadline is the
// start of its last acquire or renewal plus TTL minus the drift. A TTL is
// at least 10ms.
//
// # Lock-delay
//
// With [Options].LockDelay each node keeps its lock TTL + LockDelay (the
// delay with a drift allowance of its own) while the lease's TTL,
// validity and Deadline count the TTL alone: a lease that expires
// unreleased keeps the lock from every acquirer for the delay past its
// Deadline; a Release frees it at once. The delay holds while a majority
// of nodes keep their locks: a node restarted empty shortens it as it
// shortens the lease (package locks, "Lock-delay").
//
// # Several keys
//
// Several keys (package guard's AcquireAll, TryAcquireAll, DoAll) are
// taken one by one, in order: a Locker does not implement
// [locks.MultiTryAcquirer]. All or none over a quorum would need every
// key won on one common majority, each key's token minted and written
// back there, and a roll-back on every node won when any key misses;
// that is not built, so a set of n keys costs n acquires.
//
// # The token
//
// The token is minted from the nodes' counters: each node won reports its
// counter floored by its clock in µs, the token is the largest plus one,
// and it is written back to a majority (only where this grant still holds
// the node) before it is handed out. Any two majorities share a node, so
// the next grant reads at least the last token: tokens of successive
// grants strictly increase. What breaks it: the nodes shared by two
// majorities losing their counters (a restart without persistence,
// [Options].CounterIdle) while their clocks are behind. A resource then
// refuses the lower token ([token.StaleError]) and [Locker.Heal] moves the
// counters past its mark. Tokens are exact up to [token.MaxInt64]; a grant
// past it fails with a [*token.RangeError].
//
// Redlock's lock itself can be held twice (a node restarting without
// persistence, a pause, clock jumps): that is what the token is for — a
// fenced resource refuses the holder with the lower token once the other
// has claimed.
//
// # Forged tokens
//
// A token is a number, not a credential. [Sequencer.Current] answers the
// current holder's token (or, while the lock is free, a bound at least the
// last grant's and, with every node answering, at most the next one's):
// use it with [token.SequencerCheck], after a [token.ClockBound], at the
// resource. It needs answers from a majority of nodes.
//
// # Errors
//
// Besides package locks' errors ([locks.ErrNotObtained],
// [locks.ErrNotHeld], [locks.ErrInvalidArgument], [locks.ErrClosed]):
// [*QuorumError] when too few nodes answered (no token was issued);
// [*CounterError] when a node's counter holds a value this package did not
// write (the node counts as failed for that key; Heal replaces it);
// [*token.RangeError] at the ceiling.
//
// # Deadlines and cancels
//
// Every call returns by its context's deadline, with an error matching
// context.DeadlineExceeded (inside the QuorumError, if any) when the
// deadline cut it short, and as soon as its context is cancelled, with an
// error matching context.Canceled — a context without a deadline too
// (go-redis alone would wait for the node's NodeTimeout or ReadTimeout). A
// node's own NodeTimeout is not the caller's deadline and does not match.
// Commands sent before the context ended finish in the background, their
// outcome unknown, as after a lost reply; the nodes of a cut acquire are
// given back once its commands have finished. [Locker.Close] waits for
// them. Create the clients with ContextTimeoutEnabled (otherwise go-redis
// bounds reads by ReadTimeout, not the context) and MaxRetries: -1, as for
// redislock: a node that fails a call counts as a vote lost, and retrying
// the acquisition is the caller's (or package guard's) decision.
//
// Why the token is monotonic, the clock offset, the Sequencer's answer and
// the waiters' design: docs/design.md, "redlock".
package redlock
