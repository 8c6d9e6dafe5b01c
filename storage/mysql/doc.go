// Package mysql is the MySQL and MariaDB enforcer of fenceguard, on
// database/sql with github.com/go-sql-driver/mysql: where stale lock
// holders are stopped. A lock can be lost at any moment, so checking it
// before writing proves nothing; the database refusing the write does.
// Every access carries the holder's fencing token and claims the
// resource: it advances the resource's mark, accepting a token equal to
// the mark (one holder, many accesses) and refusing a lower one with a
// [*token.StaleError]. Importing this package registers
// go-sql-driver/mysql's driver, so sql.Open("mysql", dsn) needs no import
// of the driver of your own.
//
// # Fence
//
// [Fence] is a [token.Fence] whose marks live in a high-water table,
// fence_tokens, created by [Migrate]. Each claim is one statement, an
// upsert guarded by the mark, so concurrent claims from any number of
// processes see one order:
//
//	db, err := sql.Open("mysql", "app:secret@tcp(db:3306)/shop")
//	err = mysql.Migrate(ctx, db) // at start-up; idempotent, serialized by GET_LOCK
//	fence := mysql.NewFence(db)
//	if err := fence.Claim(ctx, "sku:42", tok); errors.Is(err, token.ErrStale) {
//		// the holder lost its lock: do not touch sku:42
//	}
//
// A Fence on a *sql.Tx claims inside the caller's transaction: the claim
// holds the mark's row lock until the transaction ends, so other fenced
// work on the same resource waits for it, and a rollback undoes the
// claim.
//
// # Column mode: Table
//
// The guarded table has a token column, fence_token BIGINT UNSIGNED NOT
// NULL DEFAULT 0 (ALTER TABLE items ADD COLUMN fence_token BIGINT UNSIGNED
// NOT NULL DEFAULT 0). [Table.Update] checks and advances the row's mark
// in the statement that makes the access, conditions included:
//
//	items, err := mysql.NewTable(mysql.TableOptions{Name: []string{"items"}, Key: "id"})
//	// UPDATE items SET stock = stock - 1 WHERE id = 42 AND stock > 0, fenced:
//	err = items.Update(ctx, db, 42, tok, mysql.Add("stock", -1), mysql.Where("stock > 0"))
//
// A refusal is exactly one of a [*token.StaleError], [ErrNoRow] or, the
// token accepted and a condition not true, a [*ConditionError] (the row is
// then claimed). [Table.Read] claims the row, then reads it (every access
// under a lock, reads included, claims; a read that did not could base a
// write on data a newer holder is about to change). The fragments of
// [Expr] and [Where] are SQL written by the program, never user input;
// their arguments are query parameters, and a fragment that could reach
// outside its own parentheses is refused before anything is sent. MySQL
// assigns columns left to right, each seeing the ones before; so that
// every expression reads the row as it was, an Expr naming a column
// assigned before it in the same Update is refused: assign that column
// after it. [Returning] reads the updated row back exactly: MySQL has no
// UPDATE … RETURNING, so the Update and the read of the row run in one
// transaction, under the row lock the UPDATE took.
//
// [Table.Upsert] inserts the row when it is missing. [Table.Delete] keeps
// the deleted row's mark as a tombstone in the high-water table, in the
// same transaction, so a stale holder cannot re-create the row through
// Upsert; tombstones name keys by text, so both need a key column whose
// text names each key once (integers, VARBINARY, binary NO PAD
// collations: [Table.Verify]). [Table.HighWater] reports a row's mark,
// its tombstone included.
//
// # Table mode: Tx
//
// [Tx] claims the resource in the high-water table as the first statement
// of a transaction, runs fn in that transaction and commits:
//
//	err := mysql.Tx(ctx, db, "sku:42", tok, func(tx *sql.Tx) error {
//		// any SQL, reads included: all of it under the claim
//		return nil
//	})
//
// The claim holds the mark's row lock until the transaction ends, so
// fenced transactions on one resource run one at a time, under READ
// COMMITTED, REPEATABLE READ or SERIALIZABLE. A stale token is refused
// before fn runs and nothing is written; fn's error or panic rolls the
// claim back too. [TxAll] claims several resources, all or nothing, in
// one order. A deadlock ([ErrDeadlock]) or lock wait timeout
// ([ErrLockTimeout]) rolls the transaction back and is never reported as
// stale: retry the whole call. When ctx carries the lease behind the
// token ([token.Expiry]), the transaction does not commit past the
// lease's end ([ErrHoldExpired]); the server's own bound on a frozen
// holder is wait_timeout, in whole seconds (see [Tokens.Tx]).
//
// The two modes keep separate marks: column mode the row's token column
// (resource "<table>/<key>"), table mode the high-water table's row for
// the resource Tx names ("sku:42"). Write each piece of data through one
// mode only: a Tx with an older token is not refused after a newer
// holder's [Table.Update] of the same row, nor the other way round.
//
// # Tokens
//
// Tokens are the whole uint64 range: the mark is a BIGINT UNSIGNED, and
// the token travels as an unsigned integer (go-sql-driver/mysql sends a
// uint64 as one, prepared or interpolated). PostgreSQL's enforcer stops
// at MaxInt64; this one does not. Resource keys are compared byte for
// byte (VARBINARY) and hold up to [MaxResourceLen] bytes; a longer key is
// refused with [ErrBadInput].
//
// # Servers and driver options
//
// The statements are written for MySQL 5.7 and later and MariaDB 10.3
// and later, with InnoDB, under any isolation level; the tests run them
// on MariaDB 10.11 under READ COMMITTED, REPEATABLE READ and
// SERIALIZABLE, and on MySQL when FENCEGUARD_MYSQL_DSN names one. MySQL has no
// RETURNING, and what an upsert reports as affected rows depends on the
// client flag CLIENT_FOUND_ROWS (go-sql-driver's clientFoundRows): so a
// claim learns the mark it found from LAST_INSERT_ID(expr), which the
// server returns with the statement's result. No driver option is
// needed or in the way: clientFoundRows, interpolateParams and parseTime
// may be set either way. [Table.Update] reports its outcome the same way,
// as a code its first assignment records before any column changes. One consequence: a claim sets the session's
// LAST_INSERT_ID() to the mark it found; on a *sql.Conn or *sql.Tx of
// your own, read an AUTO_INCREMENT id before claiming, not after.
//
// Triggers: the server reports no LAST_INSERT_ID for a statement that
// fired one. A trigger on the high-water table costs a claim a second
// round trip (a locking read of the mark, which must then hold the token:
// a claim a trigger kept from advancing the mark is an error, never
// accepted); a guarded table with triggers
// cannot be used in column mode, whose Update, Upsert and Returning then
// return [ErrTriggers]: guard such a table with [Tokens.Tx]. (Reset, on a
// high-water table with triggers, reports 0 as the mark it replaced.) A
// trigger that rewrites the token itself is the operator's: one that
// raises it moves the mark on every claim outside a transaction, refused
// ones included, though no stale token is ever accepted.
//
// The session must autocommit, as the server does by default: a claim,
// an Update or a Read's claim on a *sql.DB or *sql.Conn is one statement
// that commits on its own. With autocommit=0 (a DSN parameter, or
// init_connect) it would stay in a transaction that nothing commits: the
// call reports the token accepted, and the mark is lost with the
// connection.
//
// Acceptance, an equal token included, is decided by the claim's write
// under the row's exclusive lock on the server the DB is connected to,
// never by a read: on a read-only replica every claim fails rather than
// being accepted. Give the Fence the primary.
//
// # Errors
//
// Test errors with [errors.Is] and [errors.As]:
//
//   - [token.ErrStale]: a token below the mark; a [*token.StaleError]
//     with the mark that refused it, read under the row's lock.
//   - [token.ErrMissing], [token.ErrNoResource], [token.ErrForged]: the
//     rules every enforcer applies (package token/enforce); nothing is
//     sent.
//   - [ErrNoRow] ([token.ErrNotFound]): no such row; a [*ConditionError]
//     ([ErrCondition], [token.ErrCondition]): a [Where] condition not true.
//   - [ErrBadInput]: an argument no call could succeed with; nothing is
//     sent.
//   - [ErrTriggers]: column mode on a table with triggers, which hide the
//     statement's outcome: the row may have been written.
//   - [ErrSchema]: the high-water table or the token column is missing,
//     or the token column is not BIGINT UNSIGNED; a [*SchemaError] saying
//     what sets it up.
//   - [ErrDeadlock]: InnoDB rolled the claim's transaction back as a
//     deadlock victim; nothing was written, and it is not a refusal:
//     retry the transaction.
//   - [ErrLockTimeout]: a fenced statement waited too long for a row
//     lock (1205); nothing of the call was written, and a transaction of
//     the package's own was rolled back; not a refusal either.
//   - [ErrHoldExpired]: a fenced transaction's lease ended, or it sat
//     idle past its hold bound; nothing of it committed.
//   - [ErrCommitUnknown]: the connection broke while a fenced
//     transaction's COMMIT was on its way, or ctx ended while a statement
//     that commits on its own was on the server (which may still apply
//     it); it may or may not have taken effect.
//
// Any other error means the claim could not be made: treat it as a
// refusal, never as acceptance.
//
// Everything in this package is safe for concurrent use when the DB it
// is given is (a *sql.DB is; a *sql.Conn or *sql.Tx is not).
package mysql
