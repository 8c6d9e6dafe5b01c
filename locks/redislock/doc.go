// Package redislock is a [locks.Locker] on Redis (a single node, Sentinel or
// Cluster, through go-redis v9), with fencing tokens minted by the server in
// the same step that grants the lock, a [token.Sequencer] that tells
// resources which token the lock stands at, and a Redis-backed
// [token.Fence].
//
// A lock can be lost at any moment — a pause past the lease, a failover —
// and only the resource's check of the token makes writes safe: pass the
// lease's token with every access and claim it at the resource.
//
// # Protocol
//
// Every operation is one Lua script, loaded once and run by SHA (go-redis
// falls back to EVAL on NOSCRIPT), so each is one round trip:
//
//   - acquire: if the lock is free, token = max(counter + 1, server TIME in
//     µs + d), d the key's heal offset (0 unless the key was healed above
//     the clock), written to the counter's key ("token", or "token:d"
//     with an offset) with an idle expiry, and the lock set to "id|token"
//     with the lease's TTL;
//   - renew: PEXPIRE only if the lock still holds this very grant (its id
//     and token);
//   - release: only if the lock still holds this very grant, hand it over
//     to the first waiter, or delete it when nobody waits.
//
// A contended Acquire joins the key's queue (FIFO by arrival at the server)
// and sleeps. A release does not free the lock for everyone to race for: it
// grants it to the first live waiter — sets the lock to "waiter id|token"
// for the waiter's TTL, minting the token — and publishes the same string
// on the key's channel. Only that waiter wakes, and it holds the lock the
// moment the message arrives: no thundering herd, no further round trip,
// and no newcomer can barge in ahead of the queue. A waiter also wakes when
// the lock's remaining TTL runs out (a holder that died) and every
// WaiterTTL/3 (or TTL/3, if shorter) to refresh its place; a waiter that
// stops refreshing is dropped after WaiterTTL. A waiter that dies in the
// moment between refreshing and being handed the lock holds it, like a
// holder that dies, until its TTL expires. Blocked acquires of one Locker
// share a single pub/sub connection (on a Cluster, one per master: see
// "Redis Cluster") and one reader goroutine each: [Locker.Close] stops
// them.
//
// The lease of a handed-over grant is dated, conservatively, from the last
// request that found the waiter still waiting — the grant came after it.
// If that leaves less than half the TTL (the wake-up was late), Acquire
// renews once before returning; if the grant ran out meanwhile, it goes
// back to waiting.
//
// A wake-up can be late enough to be stale: a waiter handed the lock while
// paused, whose grant ran out, which joined the queue again, can receive
// the old grant's news after that — dating it from the new place in the
// queue would make a dead grant look fresh. The acquire script therefore
// reports when a waiter had to join the queue again, and from then on that
// Acquire takes no wake-up on trust: each is checked with one more round
// trip, which returns the grant the lock holds for this waiter now, with
// the token the server holds (not the message's), or leaves it waiting. The
// uncontended acquire and the ordinary hand-over cost no extra round trip.
//
// All keys of one lock carry the hash tag {key}, so they live in one
// Cluster slot and a script can touch them together.
//
// # What the token guarantees
//
// On one Redis node, the script that grants the lock also mints the token,
// atomically; grants of a key are therefore strictly ordered and each gets a
// token above the previous one: counter + 1, or the server's clock in
// microseconds (plus the heal offset, below) if that is larger.
//
// The counter can be lost: a failover to a replica that had not received
// the last writes (Redis replication is asynchronous), a restart without
// persistence, FLUSHALL, or the counter key expiring after CounterIdle. A
// plain counter would then restart low, and every resource would refuse the
// new holders' tokens until it caught up — safe, but stuck. The clock floor
// prevents that: after any of these, the next token is the server's time in
// microseconds, which is above every earlier token as long as the server
// clock (the new primary's, after a failover) reads later than it did at the
// last grant. What breaks it is a lost counter together with a server clock
// that went back (a stepped clock, or a failover to a host whose clock is
// behind). Then the resource refuses the low tokens (safety holds), the
// holder gets a [token.StaleError] carrying the resource's high-water, and
// [Locker.Heal] moves the counter past it.
//
// A heal puts the counter above the clock, where counter + 1 would not
// grow with time, and the argument above would fail: a failover that lost
// grant c + 1 would have the new primary mint c + 1 again, and every fence
// admits an equal token as the same holder. So Heal also records the heal
// offset d = healed value − now (stored in the counter's own key,
// "counter:d", so that it is replicated, expires and is evicted with the
// counter and never apart from it — an offset lost alone, as a key of its
// own can be under maxmemory eviction, would bring the repeat back; it
// never decreases), and the floor becomes now + d:
// healed tokens grow with the clock, d ahead of it, and the same argument
// holds shifted by d — the new primary has the offset (the heal had
// replicated) and its clock reads later, so its next token is above the
// lost one. A token that still comes from counter + 1 (several grants in
// one µs, a clock stepped back, a counter raised by an older version of
// this package) raises d to token − now, so the next floor is above it
// again (that grant itself, if a failover loses it, can still be minted
// again: see the versions below). If the heal itself is lost (a failover right after it), tokens
// fall back below the healed value and the resource refuses them as stale
// (safe); the holder heals again. Lockers of versions before the offset
// read "counter:d" as a malformed counter and fail (closed: they grant
// nothing) — upgrade every client of a lock together. An offset stored by
// the version that kept it in a key of its own (<prefix>{<key>}:tokd) is
// not read, and a key healed by a version before the offset holds a bare
// counter above the clock: its first grant here is counter + 1 (the offset
// is written with it), and a failover that loses that grant mints it again
// (integration/review19d TestDefectBareCounterAboveClockRepeatsAcrossFailover)
// — heal such keys again after upgrading, before relying on them across
// failovers: the heal writes the offset (a heal lost with a failover makes
// tokens fall back below the mark, which resources refuse as stale).
//
// The lock itself is only as good as Redis's: a failover to a lagging
// replica can lose the lock key and grant it twice. That is what fencing is
// for — the second grant carries a larger token, and the resource refuses
// the first holder once the second has touched it.
//
// # Sentinel
//
// Give [New] a go-redis Sentinel client (redis.NewFailoverClient, or
// NewUniversalClient with MasterName): every script runs on the primary
// the sentinels name, and the client moves to the new one after a
// failover. What holds across a failover: a lock key the replica had
// received is on the new primary — its lease keeps renewing and nobody
// else is granted it — and tokens keep growing (the counter, or the new
// primary's clock plus the key's heal offset). What does not: a grant the
// replica had not received when the old primary died is gone, so the lock
// is granted again while the first holder still believes it holds it,
// until its next renewal reports [locks.ErrNotHeld]. The second grant's
// token is larger (a healed key's too: see "What the token guarantees"), so a
// fence at the resource refuses the first holder once the second has
// written (the tests make this happen: replication stalled, the primary
// killed). A [Fence] on the same Sentinel setup keeps its acknowledged
// claims across the failover only with [FenceOptions.Replicas].
//
// # Exactness and the ceiling
//
// Lua numbers are doubles, exact only below 2^53; the scripts never turn a
// token into one. Tokens are canonical decimal strings throughout —
// compared by length, then digit by digit (the acquire's common case, a
// validated counter and the clock both below 9·10^15, compares the two as
// numbers, which doubles hold exactly there), incremented as strings, and
// validated when read back (a counter that holds anything else fails the
// script; nothing is granted) — so every token is exact up to the ceiling,
// [MaxToken] = 2^63−1, which every token fits into a signed 64-bit column.
//
// The clock floor is about 2^50.6 (2026); only [Locker.Heal] brings a
// counter near the ceiling, and it refuses targets at or above it
// (MaxToken − 1 is the largest), with an error wrapping
// [locks.ErrInvalidArgument] and a [*token.RangeError]. A healed key's floor is
// the clock plus the heal offset: it passes the ceiling (MaxToken − healed
// value) µs after the heal — at once for a heal to MaxToken − 1. A counter at
// the ceiling, or a floor past it, grants nothing more (rather than mint a
// token a lost grant may have had): an acquire fails with an error
// wrapping a [*token.RangeError], and so does a waiter the release could
// not hand over to (the release frees the lock, wakes the waiters, and
// each leaves the queue); nothing is left granted. Nothing in the package
// moves a counter or an offset down: each failed acquire puts them back
// and restarts their idle expiry, as a grant does. The way out is an
// operator's: delete the counter's key (<prefix>{<key>}:tok, which holds
// the offset too; it also expires on its own CounterIdle after the last
// acquire). The next
// token then comes from the clock, far below the marks the high tokens
// left at the resources, which refuse it as stale until the operator
// resets them too ([Fence.Reset], or the resource's own) — to the new
// holder's token, as [Sequencer] reports it. A resource process that
// checks with [token.SequencerCheck] still has the old, high answer cached:
// call its [token.SequencerChecker.Forget] for the lock (or restart it, or
// wait SequencerOptions.CacheTTL, a minute by default) — until then it
// admits tokens up to that answer. With the default [token.ClockBound] check at the
// resources, tokens that high were refused as forged anyway: a counter gets
// there only by healing to a mark that was itself forged past a
// [token.NoCheck].
//
// [Locker.Issued] is exact: the counter, or the floor (clock plus heal
// offset, at most MaxToken) when that is larger, at least every token
// granted.
//
// # Forged tokens: the Sequencer
//
// A token is a number, not a credential. [Sequencer] (and [Locker.Current],
// the same on a Locker's client) implements [token.Sequencer]: it answers
// the token of the current holder while the lock is held — the lock's value
// carries it — and, while it is free, the counter or the clock floor
// (the clock plus the heal offset), whichever is larger: at least every
// token granted and at most the next. A waiter has no token until a
// release mints one for it, so a resource that runs
// [token.SequencerCheck] on it refuses every token not granted yet: a
// forger can at most act as the current holder, never lock the holder or
// the queue out. The answers for a key never decrease, on the same
// assumptions as the tokens (see [Sequencer] for the argument). Wire both
// checks at the resource:
//
//	seq := redislock.NewSequencer(rdb, "") // the Locker's prefix
//	check := token.All(token.ClockBound{}, token.SequencerCheck(seq, token.SequencerOptions{}))
//	fence := redislock.NewFence(rdb, redislock.FenceOptions{Check: check})
//
// Give the Sequencer a client of the master (rdb above: a client on the
// master's address, a Sentinel failover client that is not ReplicaOnly, or
// a ClusterClient), never one of a replica: a replica's copy lags, sees the
// lock free while the grant has not reached it, and would answer its clock,
// above the holder's token. The Sequencer's script is therefore one Redis
// refuses on a read-only replica (a "#!lua" shebang without no-writes):
// through a replica, Current fails with [ErrReplica] and the check refuses
// every claim, rather than admit a forgery. That needs Redis 7.0; on 6.2
// the script does not compile and the Sequencer answers nothing (the check
// refuses every claim). See "The master only" in [Sequencer].
//
// # The Fence
//
// [Fence] keeps each resource's high-water mark in one key (no expiry),
// checked and advanced by one script on the master. Its consistency, in
// short (details in [Fence]):
//
//   - every acceptance, an equal token included, writes the mark, so it is
//     decided on the master: through a replica a claim fails (READONLY)
//     rather than accept from a copy that may lag;
//   - Redis replication is asynchronous: without [FenceOptions.Replicas], a
//     failover to a replica that had not received a claim loses it, and a
//     stale holder's token is accepted after a newer one was acknowledged;
//   - with Replicas = n, each claim is followed in the same round trip by
//     WAIT n and counts only when n replicas acknowledged it ([*ReplicaError]
//     otherwise), so an acknowledged claim survives a failover to any of
//     them. WAIT is not consensus: a failover to a replica that did not
//     acknowledge, or one that restarted without persistence, can still
//     lose it; choose n = all replicas to rule out the first.
//
// Threat model of [Fence.Reset]: it sets a mark to any value, lower
// included — the recovery from a mark a forged token poisoned, and the one
// operation that can let a stale holder back in. Keep it to operators
// (it is not a [token.Fence] method, so no middleware calls it); reset to
// the lock's current token ([Sequencer]), so the current holder and every
// later one are accepted and every earlier one still refused. Every reset
// is logged at Warn level with the resource and both marks.
//
// # Redis Cluster
//
// A [*redis.ClusterClient] is a Client like any other: the lock
// conformance suite, the Fence's, and the fault tests run on a cluster of
// three masters with a replica each (locks/redislock cluster tests,
// integration/faults cells redis-cluster/*).
//
// Hash tags. Every key of a lock — the lock, its token counter and heal
// offset, its queue and the queue's deadlines — and its wake-up channel
// are named
// <prefix>{<name>}…, so they share the slot of the name, and the master
// that serves it runs every script of the lock atomically; locks of
// different names spread over the masters. A Fence's mark is
// <prefix>{<resource>} likewise. Keep '{' and '}' out of the prefixes
// ([Options.Prefix], [FenceOptions.Prefix]): a prefix that holds a hash
// tag of its own puts every lock (or mark) of the Locker in that one slot,
// on one master. Names may contain braces, with one exception: Redis
// hashes a key's whole name when its tag is empty, so a lock name that
// starts with '}' (<prefix>{}…}), or a prefix that holds "{}", would spread
// the lock's keys over several slots, where no script can reach them
// together. On a Cluster client Acquire, TryAcquire, Heal, Issued and
// Current refuse such names with [locks.ErrInvalidArgument]; on a single node (or
// Sentinel) they work as any other.
//
// Wake-ups are classic pub/sub (PUBLISH from the release script), which
// the cluster bus carries to every node. On a [redis.ClusterClient] a
// Locker keeps one subscription per master, and each waiter subscribes on
// the master that owns its lock's slot — the node whose script publishes
// its hand-over — so the wake-up comes straight from there, not a cluster
// bus hop later (which, under many contended keys, was hundreds of ms:
// docs/benchmarks.md, "Redis Cluster"). The route is taken from the
// client's slot map when the waiter registers: after a failover or a
// slot's move, waiters already waiting keep their subscription (they hear
// the release over the bus, later) and later ones subscribe on the new
// master; a master's subscription closes after 10s without waiters. A
// client of another type that wraps a ClusterClient gets the single
// subscription, on whichever node.
//
// Failover and resharding. A Locker's scripts follow MOVED and ASK the
// way go-redis does (ClusterOptions.MaxRedirects, 3 by default). While a
// lock's slot migrates, Redis serves a script only where all of its keys
// are (else TRYAGAIN), and the lock's scripts name four keys, of which the
// queue and its deadlines exist only while someone waits: with nobody
// queued, an acquire or release of a lock in a migrating slot is refused
// for as long as the migration lasts, far longer than go-redis's few
// retries. Redis refuses before it runs the script, so the Locker (Acquire,
// TryAcquire, Release, Heal, Issued, Current, the clean-up of a failed
// acquire) and the Sequencer run it again — a backoff from 5ms doubling to
// 100ms — until the call's context ends: a call made while a slot moves
// waits for the move to finish and then succeeds, and one whose context
// ends first fails with an error wrapping the context's error and the
// TRYAGAIN. So resharding a lock's slot while it is held, queued for and
// released costs waiting for the move and round trips, nothing else; give
// Release a deadline, as every call (a migration that stalls midway blocks
// it until the deadline, and the lock is then freed by its TTL). TryAcquire
// waits too: a migrating slot says neither that the lock is free nor that
// it is held. Renew names only the lock key, which Redis serves on either
// side, and does not wait.
//
// A master that dies is another matter: go-redis reloads its slot map on
// MOVED, ASK and READONLY and when the map is older than
// ClusterStateReloadInterval (a minute by default), not when a node
// refuses connections, so calls on the dead
// master's slots would fail for up to a minute after its replica took
// over. The Locker, the Sequencer and the Fence therefore ask a Cluster
// client to reload its map after every network error; calls recover as
// soon as the cluster has promoted the replica (cluster-node-timeout plus
// an election). Calls made during the failover fail, and leave the state
// of the lock unknown, as with any network error.
//
// Tokens keep growing across failovers: a promoted replica has the
// counter (and a healed key's offset) as far as it had replicated, and the
// clock floor — clock plus offset — takes the next token past whatever it
// had not (its clock reads later than the old master's did at the lost
// grant, on the assumptions of "What the token guarantees", healed keys
// included; the tests kill a master after a heal and a grant it never
// replicated: the next token is larger, and without the offset it repeats).
//
// What a Cluster cannot promise: replication is asynchronous, so a grant
// the master acknowledged but had not yet sent to its replica is lost when
// the master dies and the replica is promoted, and the lock is granted
// again — two holders at once, each with a lease it believes is live.
// Redis Cluster's own documentation says as much; WAIT would not change it
// (the grant is acknowledged before any WAIT). Fencing is what keeps the
// resource safe: the second grant's token is larger, so a fenced resource
// refuses the first holder's writes once the second holder has touched
// it, while an unfenced one takes both (the test
// TestClusterDoubleGrantAcrossFailover forces exactly this: the grant
// reaches the master only, the master is killed, the replica promoted).
// The stale holder finds out at its next renewal.
//
// The Fence with [FenceOptions.Replicas] on a Cluster: WAIT has no key and
// counts the acknowledgements of writes made on its own connection, so
// the Fence does not let the ClusterClient route it (a ClusterClient's
// pipeline sends a keyless command to a node of its choosing). It sends
// the script and WAIT in one pipeline to the client of the master that
// holds the mark's slot (MasterForKey), and follows the redirections
// itself: on MOVED (a failover or a resharding the client's map has not
// seen) it reloads the slot map at once and sends both to the new master;
// on ASK (the slot is moving and the mark is on the target already) it
// sends ASKING, the script and WAIT to the target; on TRYAGAIN and
// CLUSTERDOWN it sends them again after a pause, five attempts in all.
// WAIT then counts the replicas of the master that wrote the mark — n is a
// number of replicas per master, not in the cluster.
//
// # Errors
//
// Besides the errors of package locks: [locks.ErrClosed] after [Locker.Close];
// [token.ErrRange] (a [*token.RangeError]) from acquires at the ceiling and
// from Heal beyond it (with [locks.ErrInvalidArgument]); [ErrNotReplicated] (a
// [*ReplicaError]) from a Fence whose replicas did not acknowledge;
// [ErrReplica] from a Sequencer whose client reached a read-only replica;
// network and server errors are returned wrapped, and mean the state of the
// lock (or the mark) is unknown.
//
// # Deadlines and the client
//
// Acquire, TryAcquire, Renew and Release return by their context's
// deadline with Redis unreachable or silent, and a call the deadline cut
// short fails with an error matching context.DeadlineExceeded (errors.Is)
// — so do Issued, Heal and the Fence's and Sequencer's calls — even when
// go-redis reported it as the socket's i/o timeout (the socket's deadline
// is the context's and may fire before the context's timer). An acquire that fails cleans up after
// itself (its place in the queue, a grant whose reply was lost) on a
// context of its own, bounded by a second: it waits for that a moment
// (50ms) past its deadline, then leaves it to finish in the background;
// [Locker.Close] waits for such clean-ups. Two go-redis settings decide
// the rest:
//
//   - ContextTimeoutEnabled: without it go-redis bounds reads and writes
//     by ReadTimeout and WriteTimeout (3s by default), not by the context:
//     a connection that hangs without failing (a blackholed network, a
//     frozen server) can hold a call past its deadline. Set it (or short
//     timeouts) to have the context's deadline bound every call. Its
//     cancellation does not: go-redis sets the socket's deadline from
//     the context's deadline and does not watch ctx.Done(), so a call on
//     a silent connection whose context is cancelled without a deadline
//     returns at ReadTimeout, with an error matching context.Canceled.
//     Give calls a deadline (package guard bounds its renewals by the
//     lease's deadline).
//   - MaxRetries and DialerRetries: go-redis retries a refused dial itself,
//     and when its retries run into the deadline it reports only the
//     context's error. With MaxRetries: -1 the refusal comes back at once
//     and package guard, which retries with backoff, keeps it in its final
//     error ("context deadline exceeded (last attempt: … connection
//     refused)").
package redislock
