// Package etcdlock is a [locks.Locker] on etcd v3, with the [Sequencer]
// that tells a resource the token of a lock's current grant and a [Fence]
// that keeps resources' marks in etcd.
//
//	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints})
//	...
//	locker, err := etcdlock.New(cli, etcdlock.Options{})
//	...
//	defer locker.Close()
//	g, err := guard.New(locker, guard.Options{TTL: 10 * time.Second})
//
// # Tokens
//
// A grant's token is the create revision of the key it writes in the
// lock's queue. etcd's revision is one linearizable counter for the whole
// cluster, so every grant's token is larger than every earlier grant's, of
// this lock and of any other. Only restoring an old snapshot makes it go
// back. Tokens are far below the clock in µs, so a resource's default
// clock bound ([token.ClockBound]) refuses no forged token here: give it
// [token.SequencerCheck] on [NewSequencer] (with the Locker's Prefix), which
// refuses every token above the current holder's. [Locker.Issued] bounds
// what was issued, queued waiters included; it is no bound for a resource.
//
// # TTL, renewal and loss
//
// Each grant's key is attached to an etcd lease of its own, of the TTL
// rounded up to whole seconds ([MinTTL] is a second; etcd raises TTLs below
// its own minimum, about 2s by default). Nothing keeps it alive in the
// background: [Lease.Renew] (package guard calls it every TTL/3) sends one
// keep-alive, so a holder that stops renewing — paused, partitioned,
// crashed — loses the lock when its lease expires. Renew and Release act
// only on this grant's key, so a late call never touches a newer grant.
//
// [Lease.Lost] is closed when the grant is known lost or can no longer be
// known held: its key was deleted (expiry, or an operator), the etcd member
// the client talks to lost its leader for about three election timeouts, or
// the watch ended. Renew then fails with [locks.ErrNotHeld]. A connection
// cut while the member keeps its leader is not reported: the local deadline
// covers it.
//
// Waiters are served in the order they queued and woken by a watch, not by
// polling. A waiter whose turn comes after it was paused checks that its own
// key is still there before it takes the turn.
//
// # Lock-delay
//
// With [Options].LockDelay every grant's etcd lease has a TTL of TTL +
// LockDelay (whole seconds, rounded up) while the lease's TTL and
// Deadline count the TTL alone, also on a lease reused from the idle
// pool: a grant that expires unreleased keeps its key, and so the lock,
// the delay past its Deadline, and waiters wake on the key's deletion as
// without a delay. A Release deletes the key, freeing the lock at once;
// so does an operator deleting the key or revoking its etcd lease. The
// rounding lengthens the delay: with TTL 2s and LockDelay 1.5s the lease
// is 4s, and the lock stays taken up to 2s past the Deadline; choose
// TTL + LockDelay in whole seconds to get the delay asked for. What the
// delay buys and what it does not: package locks, "Lock-delay".
//
// # Several keys
//
// [Locker.TryAcquireAll] tries up to [MaxTxnKeys] keys in one
// transaction, one round trip once the idle leases it needs are pooled,
// and grants them all or none, each on the condition of
// [Locker.TryAcquire], with a key and a lease of its own; package guard's
// AcquireAll, TryAcquireAll and DoAll use it first. The keys of one set
// share a token, the transaction's revision: still larger than every
// earlier grant of each key.
//
// # Your own transactions
//
// [Lease.IsOwner] holds exactly while the grant holds the lock; put it in
// the If of a transaction of your own (reach the lease through package
// guard with [locks.LeaseAs] on its Lease.Unwrap):
//
//	el, _ := locks.LeaseAs[*etcdlock.Lease](lease.Unwrap())
//	resp, err := cli.Txn(ctx).If(el.IsOwner()).Then(clientv3.OpPut(k, v)).Commit()
//	// resp.Succeeded false: the lock moved on, nothing was written.
//
// # Fence
//
// [Fence] decides every acceptance and refusal by a transaction, never by
// a read a lagging member could serve. [Fence.Reset] sets one mark back by
// name and logs it.
//
// # Deadlines, errors, concurrency
//
// Every call returns by its context's deadline, also with etcd unreachable;
// a failed acquire's clean-up may finish in the background. Besides the
// errors of package locks ([locks.ErrClosed] after [Locker.Close]), errors
// from etcd come back wrapped and leave the lock's state unknown. [Fence]
// returns the errors of package token.
//
// Close the Locker when done: it revokes the leases it keeps for reuse and
// waits for background clean-ups; granted leases stay usable. The
// *clientv3.Client is yours to close; [ClientLogger] routes its logging to
// a *slog.Logger. Lockers, leases, Fences and Sequencers are safe for
// concurrent use. The reasoning behind all this is in docs/design.md, "How
// each backend holds a lock".
package etcdlock
