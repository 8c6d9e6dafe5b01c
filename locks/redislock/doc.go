// Package redislock is a [locks.Locker] on Redis (a single node, Sentinel or
// Cluster, through go-redis v9), with fencing tokens minted by the server in
// the same step that grants the lock, and a Redis-backed [token.Fence].
//
// # Protocol
//
// Every operation is one Lua script, loaded once and run by SHA (go-redis
// falls back to EVAL on NOSCRIPT), so each is one round trip:
//
//   - acquire: SET NX PX and, in the same script, token = max(counter + 1,
//     server TIME in µs), written to the counter with an idle expiry (one
//     SET ... GET: the clock is normally ahead of the counter);
//   - renew: PEXPIRE only if the lock still holds this grant's id;
//   - release: only if the lock still holds this grant's id, hand it over
//     to the first waiter, or delete it when nobody waits.
//
// A contended Acquire joins the key's queue (FIFO by arrival at the server)
// and sleeps. A release does not free the lock for everyone to race for: it
// grants it to the first live waiter — sets the lock to the waiter's id for
// the waiter's TTL and mints its token — and publishes "id|token" on the
// key's channel. Only that waiter wakes, and it holds the lock the moment
// the message arrives: no thundering herd, no further round trip, and no
// newcomer can barge in ahead of the queue. A waiter also wakes when the
// lock's remaining TTL runs out (a holder that died) and every
// WaiterTTL/3 (or TTL/3, if shorter) to refresh its place; a waiter that
// stops refreshing is dropped after WaiterTTL. A waiter that dies in the
// moment between refreshing and being handed the lock holds it, like a
// holder that dies, until its TTL expires. Blocked acquires of one Locker
// share a single pub/sub connection and one reader goroutine:
// [Locker.Close] stops it.
//
// The lease of a handed-over grant is dated, conservatively, from the last
// request that found the waiter still waiting — the grant came after it.
// If that leaves less than half the TTL (the wake-up was late), Acquire
// renews once before returning.
//
// All keys of one lock carry the hash tag {key}, so they live in one
// Cluster slot and a script can touch them together.
//
// # What the token guarantees
//
// On one Redis node, the script that grants the lock also mints the token,
// atomically; grants of a key are therefore strictly ordered and each gets a
// token above the previous one: counter + 1, or the server's clock in
// microseconds if that is larger.
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
// The lock itself is only as good as Redis's: a failover to a lagging
// replica can lose the lock key and grant it twice. That is what fencing is
// for — the second grant carries a larger token, and the resource refuses
// the first holder once the second has touched it.
//
// # Errors
//
// Besides the errors of package locks: [ErrClosed] after [Locker.Close];
// network and server errors are returned wrapped, and mean the state of the
// lock is unknown.
package redislock
