// Package redislock is a [locks.Locker] on one Redis deployment — a single
// node, Sentinel or Cluster, through go-redis v9 — whose grants carry
// fencing tokens, with a [Sequencer] that tells resources which token a
// lock stands at and a Redis-backed [token.Fence].
//
// A lock can be lost at any moment (a pause past the lease, a failover);
// only the resource's check of the token makes writes safe. Pass the
// lease's token with every access and claim it at the resource:
//
//	locker, err := redislock.New(rdb, redislock.Options{})
//	...
//	defer locker.Close()
//	lease, err := locker.Acquire(ctx, "job:report", 10*time.Second)
//	...
//	defer lease.Release(ctx)
//	err = fence.Claim(ctx, "report:2026-11-29", lease.Token())
//
// Package guard keeps a lease renewed and says when it is lost.
//
// # Locks and leases
//
// Every call is one Lua script, one round trip. Acquire takes a free lock
// at once; a contended one joins the key's queue (first come, first
// served) and sleeps until a release hands the lock to it, carrying the
// token, or until the lock's TTL runs out. A TTL is at least a
// millisecond. Renew and Release act only while the lock still holds that
// very grant: a late call can never extend or free a newer holder's lock.
// Blocked acquires of one Locker share one pub/sub connection (on a
// Cluster, one per master); [Locker.Close] stops it and fails them.
//
// # Lock-delay
//
// With [Options].LockDelay the lock key lives TTL + LockDelay on the
// server while the lease's TTL and Deadline count the TTL alone: a lease
// that expires unreleased keeps the lock from waiters and newcomers for
// the delay past its Deadline, and they wake when the key expires, as
// without a delay. A Release hands the lock over at once. The bound is the
// server's clock and its memory: a failover or restart that loses the key
// loses the delay with it (package locks, "Lock-delay").
//
// # The token
//
// The script that grants a lock mints its token, max(counter + 1, server
// clock in µs), so successive grants of a key get strictly larger tokens
// while the counter lives. When the counter is lost — a failover to a
// replica that had not received it, a restart without persistence, the key
// idle past [Options].CounterIdle — the next token comes from the clock and
// is still larger, unless the server clock went back too. Then resources
// refuse the new holder with a [token.StaleError], and [Locker.Heal] moves
// the counter past the resource's mark (healed tokens keep growing with
// the clock). Tokens are exact up to [MaxToken] (2^63−1); a grant past it
// fails with a [*token.RangeError].
//
// Redis replication is asynchronous: a failover can lose a grant and grant
// the lock again while the first holder still believes it holds it, until
// its next renewal fails with [locks.ErrNotHeld]. The second grant's token
// is larger, so a fenced resource refuses the first holder once the second
// has claimed. This is what fencing is for.
//
// # Forged tokens
//
// A token is a number, not a credential. Check tokens at the resource
// before the claim: [token.ClockBound] refuses made-up tokens far above the
// clock, and [token.SequencerCheck] over a [Sequencer] refuses any token
// above the current holder's. Give the Sequencer a client of the master,
// never of a replica (it needs Redis 7.0, which refuses its script on a
// replica: [ErrReplica]):
//
//	seq := redislock.NewSequencer(rdb, "") // the Locker's prefix
//	check := token.All(token.ClockBound{}, token.SequencerCheck(seq, token.SequencerOptions{}))
//	fence := redislock.NewFence(rdb, redislock.FenceOptions{Check: check})
//
// The [Fence] decides every claim on the master; without
// [FenceOptions].Replicas a failover can lose an acknowledged claim.
// [Fence.Reset] sets a mark back by hand and is logged.
//
// # Sentinel and Cluster
//
// Give [New] a Sentinel failover client or a [*redis.ClusterClient] like
// any other client. On a Cluster every key of a lock is named
// <prefix>{<name>}… so that one master serves it: keep braces out of the
// prefix, and do not start a lock name with '}' (such names are refused
// with [locks.ErrInvalidArgument]). While a lock's slot migrates, calls
// wait for the move until their context ends; after a master dies, calls
// fail until the cluster has promoted its replica.
//
// # Several keys
//
// [Locker.TryAcquireAll] tries several keys in one script, one round trip,
// and grants them all or none, each on the condition of [Locker.TryAcquire]
// and with a token and a lease of its own; package guard's AcquireAll,
// TryAcquireAll and DoAll use it first. One script reaches one node only:
// a single node or a Sentinel's master takes any keys; on a Cluster the
// keys must share a hash slot, which keys sharing a hash tag do
// ({order:7}:a, {order:7}:b), as do all keys under a prefix with a hash
// tag of its own; on a [*redis.Ring] they must share a hash tag. Other sets
// are refused before anything is sent, with [locks.ErrInvalidArgument],
// and package guard then takes the keys one by one, in order.
//
// # Errors
//
// Besides package locks' errors ([locks.ErrNotObtained],
// [locks.ErrNotHeld], [locks.ErrInvalidArgument], [locks.ErrClosed]):
// [*token.RangeError] at the ceiling; [*CounterError] when a counter key
// holds a value this package did not write (nothing is granted until it is
// deleted); [*ReplicaError] ([ErrNotReplicated]) from a Fence whose
// replicas did not acknowledge; [ErrReplica] from a Sequencer on a
// replica. Other errors are network or server errors: the state of the
// lock is then unknown.
//
// # Deadlines, cancels and the client
//
// Every call returns by its context's deadline, with an error matching
// context.DeadlineExceeded when the deadline cut it short, and as soon as
// its context is cancelled, with an error matching context.Canceled — a
// context without a deadline too, like an HTTP server's request context
// when the client goes (go-redis alone would wait for the reply, or its
// ReadTimeout). A command sent before the context ended then finishes in
// the background, and its outcome is unknown, as after a lost reply: a
// release may still free the lock, a claim still raise the mark; a failed
// acquire's clean-up runs after its command. Such a command ends with its
// reply, by the client's ReadTimeout, or when the client is closed;
// [Locker.Close] waits for the Locker's. Give every call a deadline.
// Create the client with ContextTimeoutEnabled (otherwise go-redis bounds
// reads by ReadTimeout, not the context) and MaxRetries: -1 (package guard
// retries, and keeps the cause).
//
// Why the scripts, the heal offset, the hand-over and the Cluster handling
// are shaped as they are: docs/design.md, "redislock".
package redislock
