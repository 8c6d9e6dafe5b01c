// Package locks is the contract every fenceguard lock backend implements,
// and the errors callers test for.
//
// A [Locker] grants a [Lease] on a key for a TTL. Every grant carries a
// fencing token ([token.Token]) larger than any earlier grant of the same
// key. Each backend's package documents why its tokens grow and what could
// make them go back (see also docs/design.md in the repository).
//
// # A lock is not enough
//
// A lease can be lost at any moment without its holder noticing in time: a
// stop-the-world pause, a frozen VM or a slow network can outlast the TTL,
// another client is granted the lock, and the first one carries on as if it
// still held it. Nothing on the holder's side can prevent that. What makes
// the write safe is the resource checking the token: send [Lease.Token] with
// every access and let the resource refuse tokens lower than the highest it
// has seen (package token's [token.Fence], or an enforcer in the store).
//
// # Lifecycle
//
// Renew and Release are conditional on the exact grant the lease stands
// for — its stored value, create revision or znode — so a late or retried
// call can never extend or delete a newer holder's lock. Release is
// idempotent. Most users do not call Renew themselves: package guard keeps
// leases alive and cancels a context when one is lost.
//
// # Lock-delay
//
// Where the resource cannot check a token (a third-party API, a file on a
// network share, a legacy service), every locker offers a lock-delay, as
// Chubby and Consul do (an option named LockDelay): a grant that ends
// without a Release — its lease expired, its session was lost, its
// renewal refused — keeps the lock from everyone else for the delay past
// the lease's [Lease.Deadline]; a Release frees it at once. A holder paused
// past its lease that resumes within the delay therefore acts before
// anyone else is granted the lock. That is protection bounded by the
// delay, on the lock service's clock rate, and nothing more: a longer pause
// overlaps the next holder as without it. It does not replace a token
// where the resource can check one. Within the delay the lock service may
// still accept the old grant's Renew or Release (nobody else holds the
// lock then). Tokens and TTLs are unchanged: [Lease.TTL] and
// [Lease.Deadline] count the TTL alone.
//
// # Deadlines, minimum TTLs, what is underneath
//
// Every call returns by its context's deadline, also with the lock service
// unreachable; a backend's clean-up after a failed acquire may go on in the
// background, bounded, and its Close waits for it (package lockstest holds
// every backend to this). Lockers with a minimum TTL implement [MinTTLer], so
// that package guard refuses a shorter TTL when it is built. Leases that
// wrap another have a method Unwrap() Lease; [LeaseAs] finds a backend's own
// lease type through them.
//
// # Errors
//
//   - [ErrNotObtained]: [Locker.TryAcquire] found the lock held.
//   - [ErrNotHeld]: Renew or Release of a grant that is no longer held (it
//     expired, was taken over or was deleted). The holder has lost the lock
//     and may already have been overtaken.
//   - [ErrInvalidArgument]: a bad argument (empty key, TTL too short for
//     the backend, unusable options); nothing was sent to the server.
//   - [ErrClosed]: the locker was used after its Close.
//
// Any other error is a failure to reach or use the lock service; the state
// of the lock is then unknown. Callers test errors with [errors.Is].
//
// Lockers and leases are safe for concurrent use.
package locks
