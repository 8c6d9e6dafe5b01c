// Package etcdlock is a [locks.Locker] on etcd v3, whose fencing token is
// the create revision of the grant's key, and an etcd-backed [token.Fence].
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
// revisions go back.
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
// and reused by a later acquire, refreshed by a keep-alive sent alongside
// that acquire's transaction. An uncontended acquire and release is then
// one write each, as with the Mutex. The idle leases are revoked by
// [Locker.Close], or lapse at their TTL.
//
// Release and Renew are guarded by the grant's create revision, never by
// key name alone, so a late or retried release cannot remove a newer grant
// — the known bug of concurrency.Mutex, whose Unlock deletes by name and so
// deletes a re-acquisition made through the same session. [Lease.IsOwner]
// exposes the same guard for the caller's own transactions.
package etcdlock
