// Package token is the contract both sides of fenceguard share: the fencing
// token a lock grant carries, its wire form, the errors a resource returns,
// and the resource-side check that enforces it.
//
// A [Token] is a uint64 that grows with every grant of a lock; the zero
// Token means "no token" and is never issued. A token is meaningful only
// with the resource key it guards, and the resource derives that key from
// itself (a route, a row), never from what a client says.
//
// A holder gets its token from a locker (package locks) and sends it with
// every access to the resource, reads included: over HTTP in the [Header]
// header ([Token.String], [Parse]), in process in a context ([NewContext],
// [FromContext]).
//
// A resource keeps, per key, the highest token it has accepted: a [Fence].
// [Fence.Claim] accepts a token not lower than that mark and makes it the
// new mark; a lower one is refused with a [*StaleError]. A token equal to
// the mark is accepted again (one holder, many accesses):
//
//	var fence token.MemoryFence // or a store's Fence: PostgreSQL, Redis, etcd, ZooKeeper
//	if err := fence.Claim(ctx, "sku:42", tok); errors.Is(err, token.ErrStale) {
//		// the holder lost its lock: do not touch sku:42
//	}
//
// [MemoryFence] keeps marks in process memory; the stores' Fences keep them
// in the store, and every one decides an acceptance by an atomic step of
// its store, never by a read a replica may serve stale.
//
// # Forged tokens
//
// A token is a number, not a credential: a client can present any token,
// and one far above the holders' would become the mark and lock them out.
// Every enforcer therefore runs a [Check] before it claims; a refused
// token moves no mark. [DefaultCheck] is a [ClockBound] (a token more than
// [DefaultSkew] above the resource's clock in µs is refused), which bounds
// the clock-floored tokens of memlock, redislock and redlock. For etcd's
// and ZooKeeper's tokens use a [SequencerCheck], which asks the lock
// service for the current grant's token; combine checks with [All].
// [NoCheck] turns checking off. A poisoned mark is set back by hand with
// [Resetter.Reset], which every Fence of fenceguard implements and logs.
// The trust model is in docs/design.md, "Forged tokens: the trust model".
//
// Writing an enforcer of your own: package token/enforce holds the rules
// every enforcer applies, and package token/fencetest checks a Fence
// against this contract.
//
// # Storing a token
//
// A Token is a uint64, and SQL has no unsigned 64-bit type: store it in a
// bigint (signed 64-bit) column, which holds every token up to
// [MaxInt64], every token fenceguard's lockers grant. A Token is a query
// argument as it is, and a column scans into a *Token as it is
// ([Token.Value], [Token.Scan]; pgx and database/sql use both), so no
// call site converts:
//
//	_, err := tx.Exec(ctx, `UPDATE jobs SET done_by = $1 WHERE id = $2`, t, id)
//	var last token.Token
//	err = db.QueryRow(ctx, `SELECT done_by FROM jobs WHERE id = $1`, id).Scan(&last)
//
// A token above MaxInt64 is refused with a [*RangeError] instead of being
// stored as a negative number.
//
// # Errors
//
// Test errors with [errors.Is] and [errors.As]:
//
//   - [ErrStale]: a token below the mark; a [*StaleError] with the
//     resource, the presented token and the current mark.
//   - [ErrForged]: a token a [Check] refused as never granted; a
//     [*ForgedError] with the bound it exceeded.
//   - [ErrInvalid]: not the wire form; a [*SyntaxError] saying why.
//   - [ErrMissing]: no token (the zero token, or a context carrying none,
//     or one granted for another key).
//   - [ErrNoResource]: an empty resource key.
//   - [ErrRange]: a token beyond what a store or a locker's counter can
//     represent; a [*RangeError].
//   - [ErrNotFound], [ErrCondition]: a store enforcer found no such
//     resource, or a condition of the access false; the store's own
//     errors for these unwrap to them.
//
// Any other error from a Fence or a Check means the check could not be
// made: treat it as a refusal, never as acceptance.
//
// # Concurrency
//
// Every Fence and Check is safe for concurrent use. A [MemoryFence]'s zero
// value is ready to use and must not be copied after first use.
package token
