// Package review20 holds the adversarial tests of review 20: context
// deadlines, cancellation and error classification across the public API,
// with the service frozen (SIGSTOP) or blackholed (a proxy that keeps
// connections open and answers nothing) at the worst moment. Written from
// the package docs, the exported API and the non-test sources, against
// real servers the harness starts (main 3309da5). TestHeld* confirm a
// claim; TestDefect* (and the subtests gated by a backend's
// releaseDefect) fail on that code and are skipped unless
// -review20.defects is given:
//
//	go test -race ./review20 -args -review20.defects
//
// Defects (the first three fixed since: the guard's renewals are bounded
// by the lease's deadline and its Release waits for a renewal in flight
// only while its context lasts; etcdlock's Lost opens its watch in its
// goroutine; Tx's rollback is bounded by the caller's deadline plus 100ms —
// their tests run ungated; the fourth is a doc fix, its tests stay gated):
//
//   - guard Release outlasts its deadline over redislock (medium): the
//     keep-alive renews with the hold's context, which has no deadline
//     (guard/lease.go:127-128, :156); go-redis with ContextTimeoutEnabled
//     bounds a call by the context's deadline only and never watches
//     ctx.Done(), so a renewal sent to a frozen or blackholed Redis runs
//     until the socket's ReadTimeout whatever the cancel. Lease.Release
//     waits for the keep-alive goroutine unconditionally (lease.go:222),
//     so Release(ctx 200ms) returns after ~4-5s, a lost lease's Release
//     likewise, and Do with a live parent returns ~5.5s after it began
//     instead of within the TTL plus a second (its releaseBound never
//     applies to the wait). TestHeldGuardFrozen/redislock/{ReleaseLost,
//     DoLostReturns,ReleaseDuringRenewal}.
//   - guard Release hangs over etcdlock while etcd is frozen (high):
//     etcdlock's Lease.Lost opens its watch synchronously inside
//     watchOnce.Do (locks/etcdlock/etcdlock.go:636), and clientv3's Watch
//     blocks until its watch stream is up — with etcd frozen, until it
//     answers again. guard's keep-alive calls Lost before anything else
//     (guard/lease.go:144), so it is stuck there (no renewal is ever sent)
//     and Release, waiting for it (lease.go:222), does not return until
//     etcd thaws — Do with a 60s parent returned after 56s.
//     TestEtcdLostReturnsWhileFrozen (Lost not returned after 1s) and
//     TestHeldGuardFrozen/etcdlock/{ReleaseLost,DoLostReturns,
//     ReleaseDuringRenewal}.
//   - storage/postgres Tx outlasts its deadline by up to 10s (medium): when
//     fn returns — its context ended (waiting on a lease, an HTTP call), or
//     an error of its own — while PostgreSQL is frozen or blackholed and no
//     pgx call is in flight, the connection is still open and Tx's rollback
//     runs synchronously on a fresh context bounded by cleanupTimeout, 10s
//     (storage/postgres/tx.go:18, rollback at :292-296, called from :160
//     and run's defer): Tx returns 10.5s after a 500ms deadline, for the
//     eager and the ClaimWithFirstStatement paths alike.
//     TestPostgresTxRollbackByDeadline,
//     TestPostgresTxErrorRollbackByDeadline.
//   - redislock calls do not honour a context cancelled without a deadline
//     (low; doc): the errors match context.Canceled (ctxerr.Wrap), but the
//     calls return only at go-redis's socket timeout, ~5s here. The
//     package doc's "Set it ... to have the context bound every call"
//     (locks/redislock/doc.go:354) holds for deadlines only; it matters for
//     the HTTP middleware over a Redis Fence (a server's request context is
//     cancelled, without a deadline, when the client goes: the claim
//     outlives the client by ~4.8s; the handler still does not run) and is
//     the root of the first guard defect. TestDefectRedisCancelNotHonoured,
//     TestDefectHTTPClientGoneRedisFence.
//
// Observed, no claim broken: zklock's Locker.Close, which takes no context
// and states no bound, took 11s with ZooKeeper frozen after acquires cut
// short on a fresh locker (etcdlock's Close says "at most about a
// second"); TestHeldZKFreshLockerFrozen logs it. A Redis Fence claim or a
// PostgreSQL autocommitted statement cut short while the server was frozen
// runs when it thaws (the kernel had buffered it): the outcome-unknown the
// docs state, and the tests accept it as a whole or nothing.
//
// Claims that held: see the TestHeld* doc comments (guard Acquire,
// TryAcquire and Do by their deadline on every backend, the lease context
// cancelled by the local deadline when frozen or blackholed, Do's error
// ErrLost and the parent's deadline; every storage/postgres call frozen,
// blackholed or cancelled, nothing half-written, a cut Tx leaving no mark;
// the middleware's 503 problem+json with Redis, PostgreSQL, etcd and
// ZooKeeper fences and sequencers frozen, and SerializePerKey; etcdlock's
// and zklock's Sequencer, Issued, Fence, acquires, Renew; the Redis Fence
// (plain and with Replicas), Sequencer, Current, Issued, Heal; a grant whose
// reply came too late given back at once; guard's Release over redlock with
// every node frozen, whose per-node NodeTimeout is a deadline).
package review20
