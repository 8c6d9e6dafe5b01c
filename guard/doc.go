// Package guard is the holder-side runtime over any [locks.Locker]: it
// acquires a lock (retrying transient failures with backoff), keeps the
// lease alive, and tells the critical section when the lease is lost.
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
// or a slow network can outlast the TTL, and another holder be granted the
// lock before this process runs another instruction. The guard notices as
// soon as it can and cancels [Lease.Context] with a cause wrapping
// [ErrLost], but a paused process notices nothing until it resumes. Only
// the resource checking the fencing token ([token.Fence], or an enforcer in
// the store) makes writes safe; the lease context stops work early, it
// guarantees nothing.
//
// # Keep-alive and loss
//
// One goroutine per lease renews it every Options.RenewInterval (TTL/3 by
// default). The lease is lost
//
//   - at once when a renewal is refused ([locks.ErrNotHeld]) or the backend
//     reports the loss itself ([locks.LossNotifier]);
//   - at the local deadline when renewals keep failing: the locker's
//     conservative expiry estimate minus TTL·Drift ([Lease.Deadline]), so
//     the holder gives up before the server does ([ErrDeadline]).
//
// The keep-alive runs beside the critical section: a slow call or a sleep
// inside it does not lose the lease. What loses it is a pause of the whole
// process (GC, swap, a frozen VM, SIGSTOP), which stops the keep-alive too,
// or a backend that refuses or cannot be reached: the cases the fencing
// token is for.
//
// [Lease.Release] stops the keep-alive and sends the release at once, also
// while a renewal is in flight: renewals are conditional on ownership of
// the grant, so a late one cannot revive it. No renewal is sent after
// Release returns. Always release a lease (Do does): one
// that is never released keeps renewing.
//
// # Re-entrancy
//
// An Acquire or Do for a key, on the same Guard, with a context that
// carries a lease on that key (the lease's context, or the one Do passes
// to fn) returns a nested hold of the same lease and token instead of
// deadlocking. Only the outermost release releases the lock.
//
// # Several keys
//
// [Guard.DoAll] and [Guard.AcquireAll] hold several keys in one critical
// section — a transfer between two accounts, an order over three SKUs:
//
//	err = g.DoAll(ctx, []string{"acct:1", "acct:2"}, func(ctx context.Context, t map[string]token.Token) error {
//		// One transaction claims both accounts with their tokens, then
//		// moves the money (storage/postgres TxAll): a stale holder is
//		// refused as a whole, never half-way.
//		return transfer(ctx, t, "acct:1", "acct:2", 30)
//	})
//
// The keys are taken one by one in sorted order, whatever order they are
// named in, so sets that overlap never deadlock; a locker that can grant
// several keys in one round trip ([locks.MultiTryAcquirer]) is asked for
// them all at once first. Each key keeps its own
// lease, keep-alive and token: a token is meaningful only with its key, so
// each resource gets its own key's token (fn's context carries them all,
// [token.Lookup]). The context is cancelled when any lease is lost, the
// cause naming the key. A failure or cancellation half-way releases what
// was taken. Keys held by an enclosing section are nested holds, as with
// Acquire.
//
// # Deadlines and errors
//
// Acquire, TryAcquire, Release and Do return by their context's deadline,
// also with the lock service unreachable; what must still happen after it
// (Do's release, a grant that came too late given back) finishes in the
// background, bounded by the lock's own expiry. When the context ends while
// Acquire retries, its error wraps both the context's error and the last
// attempt's, so errors.Is finds either.
//
//   - [ErrLost]: the lease was lost; the cause of the lease context, and
//     what Release and Do return then (errors.Is also finds the reason:
//     [locks.ErrNotHeld] or [ErrDeadline]).
//   - [ErrReleased]: the cause of a lease context ended by Release.
//   - [locks.ErrInvalidArgument]: [New] with bad options or a TTL below the
//     locker's minimum ([locks.MinTTLer]); Acquire with a bad key. Not
//     retried, nor is a token counter at its ceiling ([token.ErrRange]).
//   - [locks.ErrNotObtained]: TryAcquire found the lock held.
//
// [Lease.Unwrap] returns the locker's own lease, for what only the backend
// offers, such as etcdlock's IsOwner; [locks.LeaseAs] finds a backend's type
// through wrappers too. Use it to read, not to renew or release.
//
// [Options.Observer] receives an [Event] for every acquisition, renewal,
// loss and release; [Options.Logger] gets what an operator should know.
// A Guard and its leases are safe for concurrent use. The reasoning is in
// docs/design.md, "The holder side: guard".
package guard
