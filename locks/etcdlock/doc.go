// Package etcdlock is a [locks.Locker] on etcd v3, whose fencing token is
// the create revision of the grant's key, the [Sequencer] that tells a
// resource the token of a lock's current grant, and an etcd-backed
// [token.Fence].
//
// # Tokens
//
// A grant writes a key under the lock's prefix; its token is that key's
// CreateRevision, read from the header of the transaction that wrote it.
// etcd's revision is one cluster-wide, linearizable counter that only
// grows, so each grant's token is larger than every earlier grant's — of
// this lock and of any other. (Not the Mutex's Header().Revision: when the
// lock was contended that is the revision at which the waiter learned of
// its turn, not its key's.) Nothing short of restoring an old snapshot makes
// revisions go back. Revisions are int64 and tokens uint64: every token is
// exact, and the ceiling, 2^63−1 revisions, is out of reach.
//
// # Queue and wake-up
//
// Waiters are served in create-revision order. Acquire joins the queue in
// one transaction that also returns the first key; a waiter then watches
// the queue's prefix (deletions only), reads once which keys are ahead of
// it, and counts their deletions as the watch reports them, so the
// hand-over costs it no request at all. The watch is opened at the current
// revision and only then are the keys ahead read: etcd serves a watch
// opened at an older revision from its unsynced-watcher loop, which
// catches up every 100ms — the reason a waiter of concurrency.Mutex, which
// watches from the revision of its last read, typically waits that long
// after a release under contention. Each grant's key has a name of its
// own, never reused. A cancelled or failed acquire deletes its key.
//
// # Hand-over: a turn is checked before it is taken
//
// The deletions a waiter counts may be old news: a waiter paused (GC,
// SIGSTOP, swap) while the lock was handed to it, past its own lease's
// TTL, resumes to find the keys ahead deleted in its watch, while etcd has
// since deleted its own key too (maybe in a later watch response, maybe
// not yet delivered) and granted the lock to someone else. So when the
// queue ahead is empty, the waiter takes its turn without a request only
// while its conservative local deadline — counted from before its last
// keep-alive was sent — is more than half a TTL away: its lease, and with
// it its key, is then alive, and a key that is there with nothing older
// ahead of it holds the lock. Otherwise it sends a keep-alive and reads its
// key (one round trip); if the key is gone it queues again, behind whoever
// holds the lock now, within the same Acquire (up to three fresh attempts,
// and one more per pooled lease found lapsed,
// while ctx allows), and the grant it eventually returns has a larger
// token than that holder's. Without the check such a waiter returned a
// grant, with a token below the current holder's, while the other held
// the lock: fencing kept the data safe, but not mutual exclusion.
//
// # Leases and what TTL means here
//
// Each grant's key is attached to an etcd lease of the requested TTL,
// rounded up to whole seconds (etcd also raises TTLs below its minimum,
// 1.5 election timeouts, about 2s by default). The lease is not kept alive
// in the background: [Lease.Renew] (the guard calls it every TTL/3) sends
// one keep-alive, so a holder that stops renewing — paused, partitioned,
// crashed — loses the lock when the lease expires, and etcd deletes its key.
// A waiter keeps its own lease alive while it waits.
//
// etcd's concurrency.Session shares one lease among all the locks of a
// process and keeps it alive in the background: cheap (no lease per lock),
// but a lock then lives as long as the process does, not as long as its
// holder renews, and a stuck critical section is never cut short. This
// package gives every held lock its own lease instead, and pays for it only
// once: a released grant's lease is kept (up to Options.IdleLeases per TTL)
// and reused by a later acquire, which reuses it as it is while two thirds
// of its TTL are left. Keep-alives keep it so in the background: when it is
// released with less left, and, while it has been idle for less than a TTL,
// whenever it is down to three quarters of it — so the acquire that takes it
// waits for nothing but its transaction, also after a pause. A lease idle
// longer than that is refreshed by a keep-alive sent alongside the
// acquire's transaction, or lapses. An uncontended acquire and release is
// then one write each, as with the Mutex. The idle leases are revoked by
// [Locker.Close], or lapse at their TTL.
//
// A late or retried release cannot remove a newer grant — the known bug of
// concurrency.Mutex, whose Unlock deletes by a name derived from the lease
// alone and so deletes a re-acquisition made through the same session.
// Here every grant writes a key of a name no other grant ever has (the
// lease ID, unique in the cluster, and 64 random bits), and only if the
// name is new (its create revision 0): deleting that name deletes this
// grant's key or nothing. Release is therefore a plain delete — on etcd
// 3.4 a transaction costs the server a copy of its uncommitted-write
// buffer that a delete does not, and the guarded release made a cycle
// about a third dearer in server CPU than the Mutex's. Renew checks the
// key's create revision. [Lease.IsOwner] is the guard for the caller's
// own transactions.
//
// # Loss
//
// [Lease.Lost] (which package guard watches) is closed when the grant is
// known lost or can no longer be known held:
//
//   - its key is deleted: the lease expired, or an operator's hand;
//   - the member the client talks to has no leader. The watch requires
//     one (clientv3.WithRequireLeader), so etcd ends it after about three
//     election timeouts without a leader (4 to 5s with the default 1s
//     election timeout) — by then the majority may be expiring the lease
//     it can no longer renew. A holder on the wrong side of a partition
//     thus stops when its member loses the cluster, not only at its local
//     deadline;
//   - the watch ends for any other reason: the client closed, the server
//     cancelled it, its first read failed.
//
// After that, [Lease.Renew] fails with [locks.ErrNotHeld]. A connection cut
// while the member keeps its leader is not reported (clientv3 reconnects
// the watch silently): the local deadline covers it. [Lease.Release] ends
// the watch.
//
// # Forged tokens
//
// A token is a number, not a credential: any client of a fenced resource
// can present any token, and one above the next grants' would raise the
// resource's mark and lock every honest holder out. etcd's tokens are
// revisions, far below the clock in µs, so the default local check
// ([token.ClockBound]) bounds nothing here. [NewSequencer] gives the
// resource the bound that does — Chubby's CheckSequencer — for
// token.SequencerCheck: the create revision of the current holder's key,
// from one linearizable read of the lock's queue (or, when nobody holds
// it, the read's revision: at least every grant so far, below every later
// one; never decreasing). Threat model:
//
//   - The forger controls the token it presents, not the lock. Anything
//     above the current holder's token is refused with [token.ErrForged],
//     before any mark moves; the most a forger can do is present the
//     holder's token, or one below it, and act as the holder until the
//     next grant — which is above it and gets through, and so does every
//     waiter after it, in order.
//   - [Locker.Issued] is not such a bound: it is the cluster's revision,
//     above every token granted so far, queued waiters' included. A token
//     fixed when a waiter joined is below it, so a forger presenting
//     Issued() was accepted and every queued waiter refused afterwards;
//     only grants made after the forgery got through.
//   - The check fails closed (no answer from etcd, no claim), caches its
//     last answer per lock (a token at or below it costs no query), and
//     needs the lock's key: the resource derives it from itself, and the
//     Sequencer's prefix must be the Locker's Options.Prefix.
//
// # The Fence
//
// [Fence] stores marks in etcd. Its check ([FenceOptions].Check, default
// [token.DefaultCheck]) runs first, through [enforce.Admit]; then one
// transaction compares and writes — a token equal to the mark is written
// again, so every acceptance and refusal is decided by a transaction in
// etcd's replicated log, linearizable through any member, never by a read
// a lagging member could serve. [Fence.Reset] sets one mark by name in one
// transaction and logs it (enforce.LogReset).
//
// # Your own transactions: IsOwner
//
// A grant's [Lease.IsOwner] is the comparison that holds exactly while the
// grant holds the lock (its key, [Lease.OwnKey], still there with its
// create revision, which is also the token): put it
// in the If of a transaction of your own and the transaction commits only
// while the lock is yours, as with concurrency.Mutex. Through package
// guard, reach the lease with locks.LeaseAs on guard's Lease.Unwrap:
//
//	el, _ := locks.LeaseAs[*etcdlock.Lease](lease.Unwrap())
//	resp, err := cli.Txn(ctx).If(el.IsOwner()).Then(clientv3.OpPut(k, v)).Commit()
//	// resp.Succeeded false: the lock moved on, nothing was written.
//
// # Deadlines and clean-up
//
// Acquire, TryAcquire, Renew and Release return by their context's
// deadline, also with etcd unreachable. A waiter that gives up deletes its
// queue key on a context of its own, bounded by a second: it waits for that
// a moment (50ms) past its deadline and then leaves it to finish in the
// background; [Locker.Close] waits for such clean-ups.
//
// # The etcd client's logging
//
// The locker uses the *clientv3.Client you built, and its logging is that
// client's: clientv3.Config.Logger, a zap logger, by default writing to
// stderr. [ClientLogger] routes it through a *slog.Logger, and passes on at
// Debug the client's warning "retrying of unary invoker failed … context
// canceled", which it logs for every request whose context ends (the
// caller has the request's error already); zap.NewNop() silences it:
//
//	cli, err := clientv3.New(clientv3.Config{
//		Endpoints: endpoints,
//		Logger:    etcdlock.ClientLogger(slog.Default()),
//	})
//
// The locker itself cuts none of its own requests short in ordinary use
// (acquire, wait, release, Close), so it causes no such warning; a request
// cancelled by your context still does, at Debug through ClientLogger.
package etcdlock
