// Package token is the contract both sides of fenceguard share: the fencing
// token a lock grant carries, its wire form, the error a resource returns for
// a stale one, and the resource-side check that enforces it.
//
// A [Token] is a uint64 that grows with every grant of a lock. Its zero value
// means "no token" and is never issued. A token is meaningful only together
// with the resource key it guards: resources derive that key from the
// resource itself (a route, a row), never from what a client says.
//
// # Holder side
//
// A lock holder obtains a token from a locker (see package
// github.com/fenceguard/fenceguard/locks) and sends it with every access to
// the guarded resource — reads included. Over HTTP it travels in the
// [Header] header in the form [Token.String] produces; in process it travels
// in a context ([NewContext], [FromContext]).
//
// # Resource side
//
// A [Fence] keeps, per resource key, the highest token it has accepted (the
// high-water mark). [Fence.Claim] accepts a token that is not lower than the
// high-water and makes it the new high-water; it rejects a lower one with a
// [*StaleError] that carries the current high-water. A token equal to the
// high-water is accepted again: one holder makes many accesses. The first
// access of a new holder therefore claims the resource, and from then on no
// older holder can touch it, however long it was paused.
//
// [MemoryFence] is the in-process Fence. Stores that enforce the check
// themselves (PostgreSQL, Redis, etcd, ZooKeeper) have their own Fence
// implementations in their packages. Every one of them decides an
// acceptance — an equal token included — by a linearizable step of its
// store (a conditional write, a locked row, a sync before the read), never
// by a read a replica may serve stale; each says which.
//
// # Forged tokens
//
// A token is a number, not a credential: any client of the resource can
// present any token, and one far above the holders' would become the mark
// and lock every honest holder out. Before a claim, every enforcer runs a
// [Check]:
//
//   - [ClockBound], the default ([DefaultCheck]): for clock-floored tokens
//     (memlock, redislock, redlock), a token more than [DefaultSkew] above
//     the resource's clock in µs is refused, with no round trip. A forger
//     can then lock a resource out for at most that skew.
//   - [SequencerCheck] (Chubby's CheckSequencer): the lock service, through
//     a [Sequencer], says which token its current grant carries, and
//     anything above it is refused. A forger can at worst act as the
//     current holder, never lock out the holder or its queue. This is the
//     check for etcd's and ZooKeeper's tokens, which the clock does not
//     bound.
//
// Combine them with [All]; [NoCheck] turns checking off. A refusal is a
// [*ForgedError]. A mark poisoned anyway (before the checks were on, or
// through a mapping that named the wrong lock) is set back by hand with
// [Resetter.Reset], which every Fence of fenceguard implements and logs.
//
// # Errors
//
// Callers test errors with [errors.Is] and [errors.As], never with ==:
//
//   - [ErrStale]: a token lower than the resource's high-water; the error is a
//     [*StaleError] with the resource, the presented and the current token.
//   - [ErrInvalid]: a wire form [Parse] rejects; the error is a
//     [*SyntaxError] saying what was wrong.
//   - [ErrMissing]: no token where one is required (the zero token, or a
//     context without one).
//   - [ErrNoResource]: an empty resource key.
//   - [ErrForged]: a token a [Check] refused as never granted; the error is
//     a [*ForgedError] with the bound it exceeded.
//   - [ErrRange]: a token beyond what a store or a locker's counter can
//     represent exactly; the error is a [*RangeError].
package token
