// Package review21 attacks three fixes of commit 43f1d22 through the
// public API against real servers:
//
//   - guard: renewals bounded by the lease's local deadline, and Release
//     waiting for a renewal in flight only while its own context lasts
//     (redislock, redlock, etcdlock, zklock; servers frozen, Redis
//     delayed through a proxy);
//   - etcdlock: Lease.Lost opening its watch in its goroutine (deletion
//     and expiry right after Lost, Release/Lost orders, concurrent Lost,
//     a frozen etcd);
//   - storage/postgres: the rollback bounded by the caller's deadline plus
//     100ms (a Tx cut short over a delayed PostgreSQL; the pool after it).
//
// Findings not fixed yet run only with -args -review21.defects:
//
//   - TestPostgresTxCommitInFlightWhenCtxEnds: a Tx whose context ends with
//     its COMMIT in flight returns the context's error (matching
//     context.Canceled), yet the transaction committed, while Tx's doc
//     says a cancelled ctx rolls the transaction back rather than commits.
//     The package doc's "once a statement is on its way its outcome is
//     unknown" covers it; Tx's bullet and its error do not.
//
// The Redis clients have ContextTimeoutEnabled, as redislock's doc asks
// for a deadline to bound every call.
package review21
