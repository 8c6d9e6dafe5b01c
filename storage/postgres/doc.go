// Package postgres is the PostgreSQL enforcer of fenceguard, on pgx v5:
// where stale lock holders are stopped. A lock can be lost at any moment,
// so checking it before writing proves nothing; the database refusing the
// write does. Every access carries the holder's fencing token, and the
// access itself claims the resource: it advances the resource's mark in the
// same statement or transaction, accepting a token equal to the mark (one
// holder, many accesses) and refusing a lower one.
//
// # Column mode: Table
//
// The guarded table has a token column, fence_token bigint not null
// default 0 ([Table.AddTokenColumn] adds it; [Table.Upsert],
// [Table.Delete], [Table.HighWater] and [Table.Reset] also use the
// high-water table for deleted rows' marks, which [Migrate] creates, so
// run both). [Table.Read], [Table.Update],
// [Table.Upsert] and [Table.Delete] check and advance the row's mark in the
// statement that makes the access. A change one UPDATE can make is one
// fenced statement, conditions included:
//
//	items, err := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id"})
//	// UPDATE items SET stock = stock - 1 WHERE id = 42 AND stock > 0, fenced:
//	err = items.Update(ctx, pool, 42, tok, postgres.Add("stock", -1), postgres.Where("stock > 0"))
//
// A refusal is exactly one of a [*token.StaleError], [ErrNoRow] or, the
// token accepted and the condition not true, a [*ConditionError] (the row
// is then claimed, as a read claims). The fragments of [Expr] and [Where]
// are SQL written by the program, never user input; their arguments are
// query parameters, and a fragment that could reach outside its own
// parentheses is refused before anything is sent. [Returning] reads the
// updated row back in the same statement. When Go computes the new
// value, [Table.Read] then [Table.Update] under the same token: the read
// claims the row.
//
// [Table.Delete] leaves a tombstone, so a stale holder cannot re-create a
// deleted row through [Table.Upsert]. Tombstones name a key by its text, so
// Delete and Upsert's insert path accept only key types whose text is
// canonical (integers, boolean, uuid, text and varchar under a
// deterministic collation) and refuse others with a [*SchemaError] around
// a [*KeyTypeError]; [Table.Verify] checks that at start-up.
//
// # Table mode: Tx
//
// [Tx] runs any SQL under a claim: it claims the resource's row in the
// table fence_tokens ([Migrate] creates it) in the same transaction, before
// fn runs, and commits after. Fenced transactions on one resource run one at
// a time. Under guard.Do (a context carrying the lease's end,
// [token.Expiry]) the transaction cannot commit once the lease has ended,
// and a holder frozen inside it holds the resource until about then; a
// frozen holder gets [ErrHoldExpired]. Without a lease, the bound is
// [TokensOptions.HoldTimeout] of idleness (15 s by default).
//
//	err := postgres.Tx(ctx, pool, "sku:42", tok, func(tx pgx.Tx) error {
//		// reads, writes, several tables
//		return nil
//	})
//
// [TxAll] is Tx over several resources, each with its own token — the
// resource side of a critical section over several locks, such as
// guard.DoAll, whose map of tokens it takes as it is. One statement
// claims every resource, in sorted order, so that transactions over
// overlapping sets never deadlock each other; all or nothing: one stale
// token refuses the whole transaction, moves no mark, and the
// [*token.StaleError] names the first refused resource.
//
//	err := g.DoAll(ctx, []string{"acct:alice", "acct:bob"}, func(ctx context.Context, tokens map[string]token.Token) error {
//		return postgres.TxAll(ctx, pool, tokens, func(tx pgx.Tx) error {
//			// debit one account, credit the other
//			return nil
//		})
//	})
//
// Column mode and table mode keep separate marks: a row's in its token
// column, a resource's in fence_tokens. A Tx on "sku:42" does not move row
// 42's token column, nor the reverse, so guard each piece of data through
// one of them only; a write that bypasses the mode its data is guarded by
// is not fenced.
//
// [Tokens] names another table and carries options; [Fence] is a
// [token.Fence] on the same table, for package httpmw. [Tokens.Prune]
// bounds the table's growth without letting a stale token in.
//
// # Guarantees
//
// Every acceptance, an equal token included, is a conditional write on the
// server the [DB] is connected to; reads only explain a refusal. A hot
// standby therefore fails every operation (SQLSTATE 25006) instead of
// accepting anything. Fencing needs no isolation above READ COMMITTED and
// works under the higher ones (a serialization failure is retried while
// nothing else ran in the transaction). Marks are bigint: tokens up to
// [token.MaxInt64] compare exactly, larger ones are refused with a
// [*token.RangeError]. A token your own SQL stores goes into a bigint
// column and back as it is, a [token.Token] argument and a *token.Token
// destination (see "Storing a token" in package token).
//
// Before any statement, every operation runs a [token.Check]
// ([TableOptions.Check], [TokensOptions.Check]; nil is
// [token.DefaultCheck]); a refused token sends nothing and moves no mark.
// A mark is read with [Tokens.HighWater], [Fence.HighWater] or
// [Table.HighWater], and a poisoned one set back by name with
// [Tokens.Reset], [Fence.Reset] or [Table.Reset], each logged at Warn
// level.
//
// # Errors
//
// Test with [errors.Is] and [errors.As]. A call that returns one of these
// wrote nothing (except the claim a [*ConditionError] reports):
//
//   - a stale token: [*token.StaleError]; a token the check refused:
//     [*token.ForgedError]; no token: [token.ErrMissing]; an empty
//     resource: [token.ErrNoResource]; a token above bigint:
//     [*token.RangeError];
//   - no such row: [ErrNoRow]; a [Where] condition not true: a
//     [*ConditionError] ([ErrCondition]);
//   - the schema does not fit: [ErrSchema] — a [*SchemaError] (a missing
//     table, key or token column, unique index, a key type tombstones
//     cannot name, a high-water table [Migrate] has not upgraded), whose
//     Fix says what sets it up ([Migrate], [Table.AddTokenColumn], …), or
//     a [*ColumnError] naming a column the table does not have;
//   - a zero token while the context carries the token of another lock:
//     [token.ErrMissing], naming both keys and what maps rows to locks
//     ([TableOptions.LockKey]);
//   - an argument no call could succeed with: [ErrBadInput].
//
// Constructors fail with descriptive errors. Any other error (a cancelled
// context, a lost connection, a server error) leaves the outcome of a
// statement already sent unknown, as with any database call: read the row
// back (its token column says which token wrote it last).
//
// # Concurrency
//
// [Table], [Tokens] and [Fence] are immutable after construction and safe
// for concurrent use, provided their [DB] is (a pool is; a connection or a
// transaction is not). Nothing here starts a goroutine or needs closing.
//
// The reasoning is in docs/design.md, "PostgreSQL enforcer".
package postgres
