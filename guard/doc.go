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
// deadline — and cancels [Lease.Context] with a [*LostError] as its cause,
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
// for it, and only then releases the lock: no renewal runs after Release
// returns. A lease that is lost stops its goroutine too; a lease that is
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
// # Observing
//
// [Options.Observer] receives an [Event] for acquisitions, renewals, losses
// and releases, with durations, for metrics and logs.
//
// A Guard and its leases are safe for concurrent use.
package guard
