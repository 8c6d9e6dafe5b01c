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
// (stale, no such row, a condition not true) takes one more statement to
// say which (two when the row changed in between).
//
// A change that one UPDATE of the row can make is one fenced statement,
// its token check, expressions over the row and conditions together — the
// fenced UPDATE items SET stock = stock - 1 WHERE id = $1 AND stock > 0:
//
//	items, _ := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id"})
//	err := items.Update(ctx, pool, 42, tok, postgres.Add("stock", -1), postgres.Where("stock > 0"))
//
// It answers in one round trip when it sells; a refusal is exactly one of
// a [*token.StaleError], [ErrNoRow] or, with the token accepted and the
// condition not true, a [*ConditionError] (the row is then claimed, as a
// read claims). [Add] and [Set] with an [Expr] compute from the row;
// [Where] adds conditions. Their fragments are SQL text — constants of
// the program, never user input — and their arguments, like every value,
// are query parameters, renumbered into the statement's own; a fragment
// that could reach outside its own parentheses (unbalanced, a semicolon,
// a comment, …) is refused before anything is sent.
//
// When the new value is computed in Go from what was read, read and write
// under the same token: the read claims the row, so an older holder's
// write is refused from then on.
//
//	err := items.Read(ctx, pool, 42, tok, []string{"stock"}, &stock)
//	...
//	err = items.Update(ctx, pool, 42, tok, postgres.Set("stock", next(stock)))
//
// Which to use for a read-modify-write: the single Update whenever the
// change is one UPDATE of the row (a decrement, a counter, a set-if); Read
// then Update when Go computes the value; table mode, [Tx], for several
// rows, several tables or any other SQL.
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
// # Where acceptance is decided
//
// Every acceptance — an equal token included, one holder's second access —
// is decided by a conditional write on the server the DB is connected to,
// in the statement that makes the access: column mode's UPDATE … WHERE
// fence_token <= $t (a read claims the row by writing its mark), table
// mode's upsert … WHERE token <= $t, and the tombstones' upserts. The
// write takes the row lock and PostgreSQL checks the condition against the
// newest committed row version, not against the statement's snapshot;
// "equal, so nothing to write" is never concluded from a read. Reads of
// the mark only ever explain a refusal (the current mark of a
// [*token.StaleError]) and are re-done with a fresh snapshot when the
// snapshot lags the refusing commit. The read consistency relied on is
// therefore that of writes on the primary: a connection to a hot standby
// fails every operation with PostgreSQL's read-only error (SQLSTATE
// 25006) instead of accepting anything, and with asynchronous replication
// a failover can lose the last committed marks as it loses any committed
// data (use synchronous replication where that matters).
//
// # Forged tokens
//
// A token is a number, not a credential: a client that presents 2^62
// would become the mark and lock every honest holder out. Every operation
// therefore first runs a [token.Check] — [TableOptions.Check] for a
// [Table], [TokensOptions.Check] for [Tokens.Tx] and the [Fence] made from
// the Tokens — and a refused token sends nothing, runs no fn and moves no
// mark (neither a row's, nor a tombstone, nor a resource's). Nil is
// [token.DefaultCheck]: the clock bound, which refuses tokens more than
// [token.DefaultSkew] above the resource's clock in µs — it costs no round
// trip, caps what a forger can do with the clock-floored tokens of
// memlock, redislock and redlock to those five minutes, and bounds nothing
// for etcd's and ZooKeeper's tokens, which need a [token.SequencerCheck].
// [NewFence] and [Tx] use the default; [token.NoCheck] turns checking off.
// The check's refusal comes back as it returned it, a [*token.ForgedError]
// (errors.Is [token.ErrForged]); any other error from the check (it could
// not decide) refuses just the same, wrapped.
//
// The check is asked about the resource as each mode names it: the
// resource key for Tx and the Fence, "<table name>/<key>" for a row of a
// Table (see "Resource names" at [Table]), the name its StaleErrors carry.
//
// A mark poisoned anyway (before the check was on, or with NoCheck) is set
// back by hand, by name, without hand-written SQL: [Tokens.Reset] and
// [Fence.Reset] ([token.Resetter]) for a resource, [Table.Reset] for a row
// (its mark and its tombstone). Every reset is logged at Warn level
// ([token.LogReset]) through [TableOptions.Logger] or
// [TokensOptions.Logger], slog.Default() when nil.
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
// The tombstone names the key by the key column's text form, so it stands
// for the row only where that text names each key exactly once — equal
// keys print alike, in every session. That holds for smallint, integer,
// bigint, boolean, uuid, and text, varchar and char under a deterministic
// collation (and domains over them); it does not for citext ('Alice' and
// 'alice' are one key), numeric (1.0 and 1.00), floating point (-0 and 0),
// the date and time types (DateStyle, TimeZone), interval, bytea
// (bytea_output), nondeterministic collations, arrays, ranges, composites.
// Delete and the insert path of Upsert check the key column's type and
// collation in the catalog once per Table ([Table.Verify], which a service
// may call at start-up) and refuse any other type with a [*SchemaError]
// whose cause is a [*KeyTypeError], before writing anything. Read and
// Update, which need no tombstone, work with every key type; to delete
// rows keyed by citext, say, key the Table by a canonical column of your
// own (a generated column lower(email) of type text, unique).
//
// # A frozen holder
//
// A fenced transaction holds its resource's row lock until it ends, and a
// holder frozen inside it would stall every other holder for the whole
// pause. [Tokens.Tx] bounds that: its claim sets, for the transaction
// only, idle_in_transaction_session_timeout to [TokensOptions.HoldTimeout]
// (15 s by default; set it to the lease's TTL), or to the time left to the
// context's deadline when sooner, so the server ends a session idle for
// that long, the resource is freed, and the frozen holder's COMMIT fails.
// Inside a caller's transaction no bound is set (see [Tokens.Tx]).
//
// # Isolation levels
//
// Fencing needs no isolation above READ COMMITTED, and works under the
// higher ones a caller may set by default: under REPEATABLE READ and
// SERIALIZABLE a claim that waited for a committing holder fails on the
// server with SQLSTATE 40001, and every operation retries it while
// nothing else has run in its transaction — Tx before fn, column mode's
// and the Fence's autocommitted statements. Inside the caller's own
// transaction nothing can be retried, and the 40001 is returned.
//
// # Token range
//
// Marks are bigint: tokens up to [token.MaxInt64] (2^63−1) are compared
// exactly, and a larger one is refused before anything is sent, with an
// error wrapping a [*token.RangeError] and [token.ErrInvalid] (the default
// check refuses it first, as forged).
//
// # Errors
//
// Callers test with [errors.Is] and [errors.As]:
//
//   - a stale token: [*token.StaleError] (errors.Is [token.ErrStale]),
//     with the resource's current mark, always above the presented token;
//   - a token the check refused: [*token.ForgedError] (errors.Is
//     [token.ErrForged]);
//   - no such row (column mode): [ErrNoRow];
//   - a [Where] condition not true, the token accepted (column mode):
//     [*ConditionError] (errors.Is [ErrCondition]); the row was claimed;
//   - a column the table does not have (a typo in [Set], [Add], a
//     [Table.Read] column or a fragment): [*ColumnError] (errors.Is
//     [ErrNoColumn]), naming it; the key or token column missing is a
//     [*SchemaError] around it;
//   - no token (zero, and none in the context for the call's lock key):
//     [token.ErrMissing] ([*token.MismatchError] when the context carries
//     another lock's token); an
//     empty resource key: [token.ErrNoResource]; a token above the bigint
//     range: [*token.RangeError] (errors.Is [token.ErrRange] and
//     [token.ErrInvalid]);
//   - a table or column that is missing or of the wrong type, no unique
//     index on the key for Upsert, or a key type tombstones cannot name
//     ([*KeyTypeError]): [*SchemaError] (errors.Is [ErrSchema]);
//   - other unusable arguments, a fragment refused among them:
//     [ErrBadInput]; unusable options: [ErrBadOptions];
//
// A call that returns any of these wrote nothing (but see [Table.Delete]
// and [Table.Upsert] for the tombstone a refusal may leave after a race,
// and [ConditionError] for the claim).
//
// A cancelled context, a lost connection or another error from pgx
// (server errors — a hot standby's read-only error among them) is
// different: the context's error (wrapped) when the context ended before
// anything was sent means nothing was written, but once a statement is on
// its way its outcome is unknown, as with any database call — the server
// may have committed it while the reply was lost or the deadline passed.
// A caller that must know reads the row (its token column says which
// token wrote it last).
//
// # Concurrency
//
// [Table], [Tokens] and [Fence] are immutable after construction (a Table
// remembers only a successful [Table.Verify]) and safe for concurrent use, provided the [DB] they are given is (a pool is; a
// single connection or transaction is not). Nothing here starts a
// goroutine or needs closing.
//
// See docs/design.md, "The resource side: claim, then act".
package postgres
