// Package postgres is the PostgreSQL enforcer of fenceguard, on pgx v5: it
// is where stale lock holders are actually stopped. A lock can be lost at
// any moment — a pause longer than the lease, and another holder is granted
// the lock before this one runs its next instruction — so checking the lock
// before writing proves nothing. What makes the write safe is the database
// refusing it: every access carries the holder's fencing token, and the
// first access claims the resource, advancing its high-water mark in the
// same statement or transaction as the access. A token equal to the mark is
// accepted (one holder, many accesses); a lower one is refused.
//
// # Two modes
//
// Column mode, [Table]: the guarded table has a token column,
// fence_token bigint not null default 0 ([Table.AddTokenColumn] adds it).
// [Table.Read] (claim and read), [Table.Update], [Table.Upsert] and
// [Table.Delete] each check and advance the row's mark in the same
// statement as the access: one round trip when it is accepted; a refusal
// (stale, or no such row) takes a second statement to say which.
//
//	items, _ := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id"})
//	err := items.Read(ctx, pool, 42, tok, []string{"stock"}, &stock)
//	...
//	err = items.Update(ctx, pool, 42, tok, postgres.Set("stock", stock-1))
//
// Table mode, [Tx]: any SQL. Tx claims the resource's row in the
// high-water table fence_tokens before fn runs, in the same transaction
// (BEGIN and the claim share one round trip), and commits; the row lock
// makes fenced transactions on one resource run one at a time. Optionally
// ([TokensOptions.ClaimWithFirstStatement]) the claim travels with fn's
// first statement instead, saving that round trip.
//
//	err := postgres.Tx(ctx, pool, "sku:42", tok, func(tx pgx.Tx) error {
//		// anything: reads, writes, several tables
//	})
//
// [Fence] is a [token.Fence] on the same table, for the HTTP middleware.
// [Migrate] creates the table; [Tokens] names another one.
//
// # Deleted rows
//
// A deleted row takes its mark with it, so a stale holder could re-create
// it. [Table.Delete] therefore leaves a tombstone: the key's row in the
// high-water table, resource "<table name>/<key as text>", set to the
// deleting token in the same statement. [Table.Upsert] inserts only after
// claiming that tombstone under its row lock, so a row deleted with token
// d cannot be re-created with a token below d. Rows inserted by SQL of your
// own bypass the check.
//
// # Errors
//
// Callers test with [errors.Is] and [errors.As]:
//
//   - a stale token: [*token.StaleError] (errors.Is [token.ErrStale]),
//     with the resource's current mark, always above the presented token;
//   - no such row (column mode): [ErrNoRow];
//   - no token (zero, and none in the context): [token.ErrMissing]; an
//     empty resource key: [token.ErrNoResource]; a token above the bigint
//     range: [token.ErrInvalid];
//   - a table or column that is missing or of the wrong type, or no unique
//     index on the key for Upsert: [*SchemaError] (errors.Is [ErrSchema]);
//   - other unusable arguments: [ErrBadInput]; unusable options:
//     [ErrBadOptions];
//   - a cancelled context: an error wrapping the context's error.
//
// A call that returns any of these wrote nothing (but see [Table.Delete]
// and [Table.Upsert] for the tombstone a refusal may leave after a race).
// Other errors come from pgx (connection lost, server errors); as with any
// database call, a failure during COMMIT leaves its outcome unknown.
//
// # Concurrency
//
// [Table], [Tokens] and [Fence] are immutable after construction and safe
// for concurrent use, provided the [DB] they are given is (a pool is; a
// single connection or transaction is not). Nothing here starts a
// goroutine or needs closing.
//
// See docs/design.md, "The resource side: claim, then act".
package postgres
