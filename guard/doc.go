// Package guard is the holder-side runtime over any [locks.Locker]: it
// acquires a lock (retrying transient failures with backoff), keeps the
// lease alive, and tells the critical section the moment the lease is lost.
//
//	g, err := guard.New(locker, guard.Options{TTL: 10 * time.Second})
//	...
//	err = g.Do(ctx, "sku:42", func(ctx context.Context, t token.Token) error {
//		// Every access to the resource carries t (also in ctx, see
//		// token.FromContext); ctx is cancelled if the lease is lost.
//		return sell(ctx, t)
//	})
//
// # What a guard can and cannot promise
//
// A lease can be lost at any moment: a pause (GC, VM freeze, swap, SIGSTOP)
// or a slow network can outlast the TTL, and another holder can be granted
// the lock before this process runs another instruction. The guard notices
// as soon as it can — a renewal refused, or renewals failing past the local
// deadline — and cancels [Lease.Context] with a cause wrapping [ErrLost],
// but a paused process notices nothing until it resumes. Only the resource
// checking the fencing token ([token.Fence], or an enforcer in the store)
// makes writes safe. The lease context is a courtesy that stops work early,
// not a guarantee.
//
// # Keep-alive and the local deadline
//
// Each lease has one goroutine that renews it every RenewInterval (a third
// of the TTL by default). The lease counts as lost
//
//   - at once, when a renewal is refused because the grant is no longer
//     held ([locks.ErrNotHeld]);
//   - at the local deadline, when renewals keep failing (server unreachable):
//     the deadline is the locker's conservative expiry estimate minus
//     TTL·Drift, so the holder gives up before the server would.
//
// [Lease.Release] cancels the lease context, stops the goroutine and waits
// for it, and only then releases the lock: no renewal is sent after
// Release returns. A renewal in flight (each is bounded by the lease's
// local deadline) is waited for only while Release's context lasts; one
// still in flight when it ends extends at most this grant, which the
// release deletes. A lease that is lost stops its goroutine too; a lease that is
// never released keeps renewing — always Release (Do does it for you).
//
// # Re-entrancy
//
// A lease's context (and the context Do passes to fn) records the hold. An
// Acquire or Do for the same key, on the same Guard, with such a context
// returns a nested hold of the same lease and token instead of
// deadlocking. Releasing a nested hold does nothing; only the outermost
// release releases the lock.
//
// # Deadlines and errors
//
// Acquire, TryAcquire, Release and Do return by their context's deadline,
// also with the lock service unreachable. What must still happen after the
// deadline — Do releasing the lock, a grant that came too late given back —
// runs on a context of its own in the background, bounded by the lock's
// own expiry (the locker's deadline of the lease, and at least a second):
// past that the lock is free anyway. Do waits for its release while its
// context lives and a short grace after.
//
// When the context ends while Acquire retries transient errors, its error
// wraps both the context's error and the last attempt's:
//
//	guard: acquire "sku:42": context deadline exceeded (last attempt: redislock: acquire "sku:42": dial tcp 127.0.0.1:6379: connect: connection refused)
//
// so errors.Is finds context.DeadlineExceeded and the transport's error
// alike.
//
// [New] refuses a TTL below the locker's minimum ([locks.MinTTLer]) with
// [locks.ErrInvalidArgument], at construction rather than at the first Acquire.
//
// # Reaching the backend's lease
//
// [Lease.Unwrap] returns the locker's own lease, for what only the backend
// offers: etcdlock's IsOwner comparison for a transaction of your own,
// zklock's znode path. [locks.LeaseAs] finds a backend's type through
// wrappers too.
//
// # Observing
//
// [Options.Observer] receives an [Event] for acquisitions, renewals, losses
// and releases, with durations, for metrics and logs. [Options.Logger] gets
// what an operator should know, and only that: a TryAcquire that finds the
// lock held, or an Acquire whose context ends while it waits its turn, is
// an outcome the caller asked for and logs at Debug.
//
// A Guard and its leases are safe for concurrent use.
package guard
