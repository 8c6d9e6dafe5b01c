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
// themselves (PostgreSQL, Redis) have their own Fence implementations in
// their packages.
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
package token
