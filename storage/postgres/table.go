package postgres

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/enforce"
)

// TableOptions configure [NewTable].
type TableOptions struct {
	// Name of the guarded table: {table} or {schema, table}. Required.
	// Give every Table over one table the same Name: it is part of the
	// resource key of the table's tombstones ([Table.Delete]).
	Name pgx.Identifier

	// Key is the column that identifies a row. Required. It must be unique
	// (a primary key or a unique index: [Table.Upsert] needs one).
	Key string

	// Token is the column holding the row's high-water mark, bigint not
	// null default 0 ([Table.AddTokenColumn] adds it). Default
	// "fence_token".
	Token string

	// Tokens is the high-water table that keeps the marks of deleted rows.
	// Default: fence_tokens on the search_path.
	Tokens *Tokens

	// Check runs before every operation, with the row's resource name
	// "<Name>/<key>" (see "Resource names" at [Table]) and the token; a
	// refused token sends nothing. Nil is [token.DefaultCheck], the clock
	// bound; [token.NoCheck] turns checking off.
	Check token.Check

	// LockKey maps a row's key to the key of the lock that guards the row,
	// e.g. [LockKeyPrefix]("sku:") when rows of items are locked as
	// "sku:<id>" (httpmw's PathValue("sku") and ChiParam("sku") keys). An operation given the zero token
	// takes the context's token only when the context carries it for
	// LockKey(key): a token of another lock is refused with an error
	// wrapping [token.ErrMissing] that names both keys, never used. Nil:
	// the lock key is the row's resource name "<Name>/<key>".
	LockKey func(key any) string

	// Logger receives the audit record of every [Table.Reset]. Nil is
	// slog.Default().
	Logger *slog.Logger
}

// Table is a table guarded in column mode: each row carries its own
// high-water mark in a token column, and every operation is one statement
// that checks and advances the mark together with the access, so a row
// can never be read or written under a token lower than one it has
// accepted.
//
// Every operation has three outcomes: done, in one round trip; refused,
// with a [*token.StaleError] carrying the row's current mark; or no such
// row, [ErrNoRow] — a refusal costs a second statement to tell those two
// apart (Delete tells them apart in its one statement). A zero token is
// taken from the context when the context carries it for the row's lock
// key ([TableOptions.LockKey], [enforce.Resolve]). Column names are quoted
// identifiers and values are query parameters, never SQL text; the only
// SQL text a Table takes is the program's own [Expr] and [Where]
// fragments, whose arguments are query parameters too.
//
// # Resource names
//
// A row's resource name is "<table name>/<key>": the Name as configured,
// its parts joined by ".", a slash, and the key as Go formats it — a string
// as is, an integer in decimal, a [16]byte as a UUID, a [driver.Valuer]
// (pgtype values) by its value, anything else with fmt.Sprint. It is
// computed without a round trip, and it is the name both the
// [TableOptions.Check] is asked about and every [*token.StaleError]
// carries: a check that maps resources to lock keys (a
// [token.SequencerCheck]'s LockKey) sees "items/42" for Update(…, 42, …).
// The tombstones of deleted rows are named by the server instead (the key
// column's own text form, see [Table.Delete]), which is the same text for
// every key type tombstones accept unless the key is a string in
// another spelling (a UUID in capitals, "007" for an integer key).
//
// # Forged tokens
//
// Every operation runs the [TableOptions.Check] before it sends anything
// ([token.DefaultCheck] unless set): a token the check refuses comes back
// as its [*token.ForgedError] and moves no mark, neither the row's nor a
// tombstone. [Table.HighWater] reads a row's marks, [Table.Reset] sets a
// poisoned one back.
//
// A Table is safe for concurrent use. Statement texts are built once per
// table and shape (operation and column list), so pgx's statement cache
// serves every later call.
type Table struct {
	name    string // as configured, for messages and tombstone keys
	tbl     string // sanitized name
	key     string // quoted key column
	tok     string // quoted token column
	rawKey  string // as configured, to refuse assignments to it
	rawTok  string
	tokens  *Tokens
	check   token.Check      // nil: token.DefaultCheck
	lockKey func(any) string // nil: the row's resource name
	logger  *slog.Logger     // nil: slog.Default()

	currentSQL string // $1 key → the row's token
	deleteSQL  string
	marksSQL   string // $1 key, $2 tombstone prefix → (row token, tombstone token)
	// highWaterSQL: $1 key, $2 tombstone prefix → (row token, tombstone
	// token), each NULL when absent (no floor: see HighWater)
	highWaterSQL string

	// verified is set once the key column was found fit for tombstones
	// (see Verify); refusals are not remembered.
	verified atomic.Bool

	mu     sync.Mutex
	shapes map[shapeKey]string   // guarded by mu: statement texts
	exprs  map[string]*exprShape // guarded by mu: Update with Expr, Add, Where
}

// maxShapes bounds the statement texts a Table remembers; beyond it texts
// are built per call (still correct, and still cached by pgx per
// connection).
const maxShapes = 256

// NewTable returns the guarded table described by o. It fails with a
// descriptive error for missing or unusable names; it does
// not touch the database.
func NewTable(o TableOptions) (*Table, error) {
	if o.Token == "" {
		o.Token = "fence_token"
	}
	if o.Tokens == nil {
		o.Tokens = defaultTokens
	}
	if err := checkName("table name", o.Name); err != nil {
		return nil, err
	}
	if err := checkIdentifier("key column", o.Key); err != nil {
		return nil, err
	}
	if err := checkIdentifier("token column", o.Token); err != nil {
		return nil, err
	}
	if o.Key == o.Token {
		return nil, fmt.Errorf("postgres: key and token column are both %q", o.Key)
	}
	tb := &Table{
		name:    strings.Join(o.Name, "."),
		tbl:     o.Name.Sanitize(),
		key:     quote(o.Key),
		tok:     quote(o.Token),
		rawKey:  o.Key,
		rawTok:  o.Token,
		tokens:  o.Tokens,
		check:   o.Check,
		logger:  o.Logger,
		lockKey: o.LockKey,
		shapes:  map[shapeKey]string{},
		exprs:   map[string]*exprShape{},
	}
	tb.currentSQL = `SELECT ` + tb.tok + ` FROM ` + tb.tbl + ` WHERE ` + tb.key + ` = $1`
	tb.marksSQL = `SELECT (SELECT ` + tb.tok + ` FROM ` + tb.tbl + ` WHERE ` + tb.key + ` = $1),
 coalesce((SELECT token FROM ` + tb.tokens.table + ` WHERE resource = $2 || $1::text), (SELECT token FROM ` + tb.tokens.table + ` WHERE resource = ''))`
	tb.highWaterSQL = `SELECT (SELECT coalesce(` + tb.tok + `, 0) FROM ` + tb.tbl + ` WHERE ` + tb.key + ` = $1),
 (SELECT token FROM ` + tb.tokens.table + ` WHERE resource = $2 || $1::text)`
	// The tombstone's upsert locks the high-water table's row for this key
	// before the row itself is locked (the join needs its output before
	// DELETE sees a row), the order the insert path of Upsert uses too.
	// CTE names carry a prefix so that they cannot hide a table the
	// statement means.
	tb.deleteSQL = `WITH fenceguard_cur AS (SELECT ` + tb.tok + ` FROM ` + tb.tbl + ` WHERE ` + tb.key + ` = $2),
fenceguard_t AS (INSERT INTO ` + tb.tokens.table + ` AS m (resource, token, updated_at)
 SELECT $3 || $2::text, greatest($1::bigint, (SELECT token FROM ` + tb.tokens.table + ` WHERE resource = '')), now()
 WHERE EXISTS (SELECT FROM fenceguard_cur c WHERE c.` + tb.tok + ` <= $1::bigint)
 ON CONFLICT (resource) DO UPDATE SET token = greatest(m.token, excluded.token), updated_at = excluded.updated_at
 RETURNING true),
fenceguard_d AS (DELETE FROM ` + tb.tbl + ` r USING fenceguard_t WHERE r.` + tb.key + ` = $2 AND r.` + tb.tok + ` <= $1::bigint RETURNING true)
SELECT (SELECT ` + tb.tok + ` FROM fenceguard_cur), EXISTS (SELECT FROM fenceguard_d)`
	return tb, nil
}

// Clause is one clause of [Table.Update]: a column's new value —
// [Set] with a value or an [Expr], [Add] — a condition on the row,
// [Where], or a column to read back, [Returning]. [Table.Upsert] takes
// only Set with values.
type Clause struct {
	kind   int
	column string
	value  any // a value, the delta of Add, or the Expression of Expr and Where
}

// Set assigns value to column. The value is sent as a query parameter,
// whatever it contains — unless it is an [Expression] ([Expr]), SQL of the
// program's own that computes the new value from the row in the same
// statement.
func Set(column string, value any) Clause {
	if e, ok := value.(Expression); ok {
		return Clause{kind: clauseExpr, column: column, value: e}
	}
	return Clause{column: column, value: value}
}

// Read claims the row with key for t and reads columns into dest, in one
// statement: the row's mark is advanced to t (a token equal to the mark is
// accepted: one holder, many accesses) and a lower token is refused. Every
// access under a lock, reads included, must claim: a read that did not
// could base a write on data a newer holder is about to change.
//
// Read writes the row (the mark) even when t equals the mark, and holds the
// row lock until the statement's transaction ends. If a destination cannot
// hold its column, Read returns pgx's scan error after the claim was made.
func (tb *Table) Read(ctx context.Context, db DB, key any, t token.Token, columns []string, dest ...any) error {
	resource, err := tb.args(db, "read", key)
	if err != nil {
		return err
	}
	if len(columns) != len(dest) {
		return fmt.Errorf("%w: %d columns but %d destinations", ErrBadInput, len(columns), len(dest))
	}
	for _, c := range columns {
		if err := checkColumn(c); err != nil {
			return err
		}
	}
	t, v, err := tb.admit(ctx, "read", resource, key, t)
	if err != nil {
		return err
	}
	sql := tb.shape('r', columns, func() string { return tb.updateSQL(nil, columns) })
	found, err := tb.claim(ctx, db, "read", sql, []any{v, key}, resource, t, dest, nil)
	if err == nil && !found {
		err = tb.noRow("read", key)
	}
	return err
}

// Update assigns set to the row with key if t is not lower than the row's
// mark, and advances the mark to t, in one statement. A refused Update
// changes nothing.
//
// Assignments may compute from the row, and conditions may guard them, in
// the same statement as the token check — the fenced form of
// UPDATE items SET stock = stock - 1 WHERE id = $1 AND stock > 0:
//
//	err := items.Update(ctx, pool, 42, t, postgres.Add("stock", -1), postgres.Where("stock > 0"))
//
// [Add] and [Set] with an [Expr] compute the new value from the row as it
// was; [Where] adds conditions. Accepted, that is one statement, one round
// trip. Refused, it is exactly one of: a [*token.StaleError] (the token is
// below the mark, whatever the conditions), [ErrNoRow], or a
// [*ConditionError] (errors.Is [ErrCondition]) when the token was accepted
// and the conditions were not true — then nothing is assigned, but the
// row is claimed for t, as a [Table.Read] claims: a condition is a read of
// the row, and the holder acts on what it saw. Telling them apart takes
// one more statement, only on refusal (two when the row changed between
// the statements' snapshots).
//
// [Returning] reads columns of the updated row back in the same
// statement (a debit and its new balance, one round trip); a refused
// Update leaves its destinations untouched.
//
// A column that does not exist — a typo in a Set or an Add, or in a
// fragment — is a [*ColumnError] naming it.
func (tb *Table) Update(ctx context.Context, db DB, key any, t token.Token, set ...Clause) error {
	resource, err := tb.args(db, "update", key)
	if err != nil {
		return err
	}
	cols, vals, plain, err := tb.assignments(set)
	if err != nil {
		return err
	}
	if len(cols) == 0 {
		return fmt.Errorf("%w: Update with nothing to set (use Read to only claim)", ErrBadInput)
	}
	ret, dest, err := returning(set)
	if err != nil {
		return err
	}
	var x *exprShape
	if !plain {
		if x, err = tb.exprShape(set); err != nil {
			return err
		}
	}
	t, v, err := tb.admit(ctx, "update", resource, key, t)
	if err != nil {
		return err
	}
	if x != nil {
		return tb.updateExpr(ctx, db, x, set, key, resource, t, v, dest)
	}
	sql := tb.updateShape(cols, ret)
	found, err := tb.claim(ctx, db, "update", sql, append([]any{v, key}, vals...), resource, t, dest, nil)
	if err == nil && !found {
		err = tb.noRow("update", key)
	}
	return err
}

// Upsert updates the row with key like [Table.Update], or, if there is no
// such row, inserts it with key, the token and set (other columns get
// their defaults). The key column needs a unique index.
//
// The insert path first claims the key's tombstone in the high-water table
// (resource "<table name>/<key as text>"), which [Table.Delete] leaves
// behind: a deleted row cannot be re-created by a holder whose token is
// lower than the deleting one. That claim stays in the high-water table,
// so each key ever inserted through Upsert costs a row there. An insert
// path refused because a row with a higher mark appeared meanwhile may
// have recorded t in the tombstone (harmless, as for Delete).
//
// Like Delete, the insert path needs a key column whose text form names
// each key once ([Table.Verify]); with any other key type it returns a
// [*SchemaError] and inserts nothing. Updates of existing rows work with
// every key type.
func (tb *Table) Upsert(ctx context.Context, db DB, key any, t token.Token, set ...Clause) error {
	resource, err := tb.args(db, "upsert", key)
	if err != nil {
		return err
	}
	cols, vals, plain, err := tb.assignments(set)
	if err != nil {
		return err
	}
	if !plain {
		return fmt.Errorf("%w: Upsert takes values only (no Expr, Add or Where: the row may not exist)", ErrBadInput)
	}
	if ret, _, _ := returning(set); len(ret) > 0 {
		return fmt.Errorf("%w: Upsert takes values only (Returning is for Update)", ErrBadInput)
	}
	t, v, err := tb.admit(ctx, "upsert", resource, key, t)
	if err != nil {
		return err
	}
	upd := tb.shape('u', cols, func() string { return tb.updateSQL(cols, nil) })
	ins := tb.shape('i', cols, func() string { return tb.insertSQL(cols) })
	updArgs := append([]any{v, key}, vals...)
	insArgs := append([]any{v, key, tb.name + "/"}, vals...)
	for attempts, retries := 0, 0; ; {
		// The common case, an existing row, needs no tombstone.
		found, err := tb.claim(ctx, db, "upsert", upd, updArgs, resource, t, nil, nil)
		if found || err != nil {
			return err
		}
		if err := tb.Verify(ctx, db); err != nil {
			return err
		}
		var done bool
		err = db.QueryRow(ctx, ins, insArgs...).Scan(&done)
		if retriable(db, err) && retries < maxSerializationRetries && ctx.Err() == nil {
			retries++
			continue
		}
		if floor, ok := floorRaise(err); ok && floor > t {
			// A Prune committed while the insert ran, and took the
			// key's tombstone: the floor refuses t.
			return &token.StaleError{Resource: resource, Presented: t, Current: floor}
		}
		if err != nil {
			return tb.wrap("upsert into", ins, nil, err)
		}
		if done {
			return nil
		}
		// Refused by the tombstone or by a row inserted meanwhile; a fresh
		// read says by how much.
		var row, tomb *int64
		if err := db.QueryRow(ctx, tb.marksSQL, key, tb.name+"/").Scan(&row, &tomb); err != nil {
			return tb.wrapErr("upsert into", tb.marksSQL, err)
		}
		if cur := token.Token(max(deref(row), deref(tomb))); cur > t {
			return &token.StaleError{Resource: resource, Presented: t, Current: cur}
		}
		if attempts++; attempts >= maxAttempts {
			return tb.unstable("upsert", key)
		}
	}
}

// Delete deletes the row with key if t is not lower than its mark. The
// mark does not go with the row: Delete records t as the key's tombstone
// in the high-water table (resource "<table name>/<key as text>", the key
// column's own text form), in the same statement, and [Table.Upsert]
// refuses to re-create the row for a lower token. Statements of your own
// that insert rows bypass that check; create rows that may have been
// deleted through Upsert.
//
// The tombstone names the key by its text, so it stands for exactly the
// keys that print that way: Delete needs a key column whose text form
// names each value of the column's equality once, whatever the session's
// settings ([Table.Verify] says which types). With a key type that is not
// — citext, numeric, floating point, dates and times, bytea, a
// nondeterministic collation, … — it returns a [*SchemaError] and deletes
// nothing: the row could otherwise be re-created under an older token in
// another spelling ("Alice" for "alice", 1.00 for 1.0).
//
// A Delete refused because the row changed under it (a higher mark, or a
// delete by someone else) may have recorded t in the tombstone anyway.
// That is harmless: t was not below the row's mark when the statement
// began, and a tombstone is consulted only while its row does not exist
// (a successful Delete raises it to the deleting token).
func (tb *Table) Delete(ctx context.Context, db DB, key any, t token.Token) error {
	resource, err := tb.args(db, "delete", key)
	if err != nil {
		return err
	}
	t, v, err := tb.admit(ctx, "delete", resource, key, t)
	if err != nil {
		return err
	}
	if err := tb.Verify(ctx, db); err != nil {
		return err
	}
	found, err := tb.fenced(ctx, db, "delete from", tb.deleteSQL, []any{v, key, tb.name + "/"}, resource, t)
	if err == nil && !found {
		err = tb.noRow("delete", key)
	}
	return err
}

// args validates what every operation gets and returns the row's resource
// name.
func (tb *Table) args(db DB, op string, key any) (string, error) {
	if db == nil {
		return "", fmt.Errorf("%w: nil DB", ErrBadInput)
	}
	k, err := keyText(key)
	if err != nil {
		return "", fmt.Errorf("%w: %s %s: %v", ErrBadInput, op, tb.name, err)
	}
	return tb.name + "/" + k, nil
}

// admit resolves the token (the context's when t is 0 and the context
// carries it for the row's lock key) and admits it for resource: the
// check, the bigint range, the context. Nothing has been sent yet.
func (tb *Table) admit(ctx context.Context, op, resource string, key any, t token.Token) (token.Token, int64, error) {
	lk := resource
	if tb.lockKey != nil && t == 0 {
		lk = tb.lockKey(key)
	}
	if err := lockMismatch(ctx, op+" "+resource, lk, t, func(ck string) string { return tb.lockKeyHint(ck, lk, key) }); err != nil {
		return 0, 0, err
	}
	t, err := enforce.Resolve(ctx, lk, t)
	if err != nil {
		return 0, 0, fmt.Errorf("postgres: %s: %w", op, err)
	}
	if err := ctx.Err(); err != nil {
		return 0, 0, fmt.Errorf("postgres: %s %s: %w", op, tb.name, err)
	}
	v, err := admit(ctx, tb.check, resource, t)
	if err != nil {
		return 0, 0, err
	}
	return t, v, nil
}

// LockKeyPrefix returns a [TableOptions.LockKey] for rows whose lock key
// is prefix followed by the row's key as it appears in the row's resource
// name (Go's formatting of strings and integers, a UUID's canonical form:
// see "Resource names" at [Table]): LockKeyPrefix("sku:") maps key 42 to
// "sku:42".
//
// The mapping is of the Go value, not of the row: pass keys as Go values
// of the key's kind (any Go integer type for an integer key, a string for
// a text key), never as the text a client sent. PostgreSQL reads the string "01" as row 1 of a bigint key,
// while its lock key is "sku:01" — another lock than row 1's "sku:1", so a
// holder of "sku:01" could write row 1 under a lock that does not guard
// it. Parse and canonicalise keys before they reach the
// Table, as the handler must anyway to name the lock it takes.
func LockKeyPrefix(prefix string) func(key any) string {
	return func(key any) string {
		k, err := keyText(key)
		if err != nil {
			return "" // matches no context: the token must be explicit
		}
		return prefix + k
	}
}

// keyText is the key as it appears in a row's resource name.
func keyText(key any) (string, error) {
	for range 8 { // pointers and Valuers around the value
		if key == nil {
			return "", errors.New("nil key")
		}
		rv := reflect.ValueOf(key)
		if rv.Kind() == reflect.Pointer && rv.IsNil() {
			return "", errors.New("nil key")
		}
		if v, ok := key.(driver.Valuer); ok {
			val, err := v.Value()
			if err != nil {
				return "", fmt.Errorf("key %T: %v", key, err)
			}
			key = val
			continue
		}
		if rv.Kind() != reflect.Pointer {
			break
		}
		key = rv.Elem().Interface()
	}
	switch k := key.(type) {
	case string:
		return k, nil
	case []byte:
		return string(k), nil
	case [16]byte:
		return fmt.Sprintf("%x-%x-%x-%x-%x", k[0:4], k[4:6], k[6:8], k[8:10], k[10:16]), nil
	}
	return fmt.Sprint(key), nil
}

func checkColumn(c string) error {
	switch {
	case c == "":
		return fmt.Errorf("%w: empty column name", ErrBadInput)
	case strings.ContainsRune(c, 0):
		return fmt.Errorf("%w: column name %q contains a NUL byte", ErrBadInput, c)
	}
	return nil
}

// assignments validates set and splits it into columns and values; plain
// is false when set has more than values (Expr, Add, Where), and then
// cols and vals are of no use. [Returning] clauses are not assignments:
// see [returning].
func (tb *Table) assignments(set []Clause) (cols []string, vals []any, plain bool, err error) {
	cols = make([]string, 0, len(set))
	vals = make([]any, 0, len(set))
	plain = true
	for _, a := range set {
		if a.kind != clauseValue && a.kind != clauseReturning {
			plain = false
		}
		if a.kind == clauseWhere {
			continue
		}
		if a.kind == clauseReturning {
			continue
		}
		if err := checkColumn(a.column); err != nil {
			return nil, nil, false, err
		}
		switch a.column {
		case tb.rawKey:
			return nil, nil, false, fmt.Errorf("%w: assignment to the key column %q", ErrBadInput, a.column)
		case tb.rawTok:
			return nil, nil, false, fmt.Errorf("%w: assignment to the token column %q (the token is the fencing token)", ErrBadInput, a.column)
		}
		for _, c := range cols {
			if c == a.column {
				return nil, nil, false, fmt.Errorf("%w: column %q assigned twice", ErrBadInput, c)
			}
		}
		cols, vals = append(cols, a.column), append(vals, a.value)
	}
	if !plain && len(cols) == 0 {
		return nil, nil, false, fmt.Errorf("%w: Update with conditions but nothing to set (use Read to only claim)", ErrBadInput)
	}
	return cols, vals, plain, nil
}

// shapeKey identifies a statement text: the operation and its columns,
// joined by NUL (which no column name contains).
type shapeKey struct {
	op   byte
	cols string
}

// shape returns the statement text for op over cols, building it once.
func (tb *Table) shape(op byte, cols []string, build func() string) string {
	k := shapeKey{op, strings.Join(cols, "\x00")}
	tb.mu.Lock()
	sql, ok := tb.shapes[k]
	tb.mu.Unlock()
	if ok {
		return sql
	}
	sql = build()
	tb.mu.Lock()
	if len(tb.shapes) < maxShapes {
		tb.shapes[k] = sql
	}
	tb.mu.Unlock()
	return sql
}

// updateSQL is the claim-and-maybe-write statement of Read, Update and the
// first step of Upsert: $1 token, $2 key, $3… the values of set. It
// advances the mark (and assigns) only if the token is not lower, and
// returns one row — true and the returned columns — when it did, none when
// it did not: then [Table.claim] asks why, with a second statement.
//
// A single statement could tell "stale" from "no such row" too (a CTE with
// a read of the mark when the update matched nothing), and an earlier
// version did: but that read's executor start-up is paid on every call,
// refusals or not — 5–13% of the throughput with 8 clients in
// BenchmarkEnforcer. Refusals are rare; successes are the workload.
func (tb *Table) updateSQL(set, returning []string) string {
	var b strings.Builder
	b.WriteString(`UPDATE ` + tb.tbl + ` SET ` + tb.tok + ` = $1::bigint`)
	for i, c := range set {
		b.WriteString(`, ` + quote(c) + ` = $` + strconv.Itoa(i+3))
	}
	b.WriteString(` WHERE ` + tb.key + ` = $2 AND ` + tb.tok + ` <= $1::bigint RETURNING true`)
	for _, c := range returning {
		b.WriteString(`, ` + quote(c))
	}
	return b.String()
}

// claim runs an updateSQL statement. found is false when there is no such
// row. When the statement matched nothing, a second statement reads the row
// with a fresh snapshot: no row is no row, a higher mark is stale, and
// otherwise — the row was deleted and re-created lower, or its mark
// lowered, in between — the statement runs again. So does a statement
// refused with a serialization failure (REPEATABLE READ or SERIALIZABLE
// by default on the session) when db is not a transaction: it was a
// transaction of its own.
func (tb *Table) claim(ctx context.Context, db DB, op, sql string, args []any, resource string, t token.Token, dest []any, x *exprShape) (found bool, err error) {
	scan := append([]any{new(bool)}, dest...)
	for attempts, retries := 0, 0; attempts < maxAttempts; {
		err := db.QueryRow(ctx, sql, args...).Scan(scan...)
		if err == nil {
			return true, nil
		}
		if retriable(db, err) && retries < maxSerializationRetries && ctx.Err() == nil {
			retries++
			continue
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return true, tb.wrap(op, sql, x, err)
		}
		var cur int64
		err = db.QueryRow(ctx, tb.currentSQL, args[1]).Scan(&cur)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		if err != nil {
			return true, tb.wrap(op, tb.currentSQL, nil, err)
		}
		if token.Token(cur) > t {
			return true, &token.StaleError{Resource: resource, Presented: t, Current: token.Token(cur)}
		}
		attempts++
	}
	return true, tb.unstable(op, args[1])
}

// insertSQL is the insert path of Upsert: $1 token, $2 key, $3 tombstone
// prefix, $4… the values of set. It claims the key's tombstone (t: locked,
// and advanced only if the token is not lower), and only then inserts the
// row, or, if one appeared meanwhile, updates it under the usual check.
// fenceguard_cur is never read: it comes first so that $2 takes the key
// column's type (a parameter's type is inferred where it is first
// referenced), not text from "$2::text".
func (tb *Table) insertSQL(set []string) string {
	var cols, vals, upd strings.Builder
	for i, c := range set {
		q := quote(c)
		cols.WriteString(`, ` + q)
		vals.WriteString(`, $` + strconv.Itoa(i+4))
		upd.WriteString(`, ` + q + ` = excluded.` + q)
	}
	return `WITH fenceguard_cur AS (SELECT FROM ` + tb.tbl + ` WHERE ` + tb.key + ` = $2),
fenceguard_t AS (INSERT INTO ` + tb.tokens.table + ` AS m (resource, token, updated_at) ` + floorGateSQL(tb.tokens.table, "$3 || $2::text", "$1::bigint") + `
 ON CONFLICT (resource) DO UPDATE SET token = excluded.token, updated_at = excluded.updated_at
 WHERE m.token <= excluded.token RETURNING true),
fenceguard_i AS (INSERT INTO ` + tb.tbl + ` AS r (` + tb.key + `, ` + tb.tok + cols.String() + `) SELECT $2, $1::bigint` + vals.String() + ` FROM fenceguard_t
 ON CONFLICT (` + tb.key + `) DO UPDATE SET ` + tb.tok + ` = excluded.` + tb.tok + upd.String() + `
 WHERE r.` + tb.tok + ` <= excluded.` + tb.tok + ` RETURNING true)
SELECT EXISTS (SELECT FROM fenceguard_i)`
}

// fenced runs Delete's statement, whose first two arguments are the token
// and the key, and which answers in one row: the row's mark (nil: no such
// row) and whether it deleted. found is false when there is no such row.
//
// Under READ COMMITTED the write and the snapshot read can disagree: the
// write was refused by a row version committed after the snapshot (a
// newer mark, or a delete), which cur does not see yet. A StaleError must
// never report a mark at or below the presented token, so then a second
// statement, with a fresh snapshot, reads the row again: a higher mark is
// stale, no row is no row, and otherwise (the row was deleted and
// re-created lower in between) the statement runs again. A serialization
// failure is retried as in [Table.claim].
func (tb *Table) fenced(ctx context.Context, db DB, op, sql string, args []any, resource string, t token.Token) (found bool, err error) {
	for attempts, retries := 0, 0; attempts < maxAttempts; {
		var (
			mark    *int64 // the row's mark as of the snapshot; nil: no such row
			claimed *bool
		)
		err := db.QueryRow(ctx, sql, args...).Scan(&mark, &claimed)
		if retriable(db, err) && retries < maxSerializationRetries && ctx.Err() == nil {
			retries++
			continue
		}
		if _, ok := floorRaise(err); ok {
			// Delete's tombstone is raised to the floor its snapshot
			// read; a Prune that committed meanwhile raised the floor
			// further. Nothing was deleted: run the statement again.
			attempts++
			continue
		}
		if err != nil {
			return true, tb.wrap(op, sql, nil, err)
		}
		switch {
		case claimed != nil && *claimed:
			return true, nil
		case mark == nil:
			return false, nil
		}
		if token.Token(*mark) > t {
			return true, &token.StaleError{Resource: resource, Presented: t, Current: token.Token(*mark)}
		}
		var cur int64
		err = db.QueryRow(ctx, tb.currentSQL, args[1]).Scan(&cur)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		if err != nil {
			return true, tb.wrapErr(op, tb.currentSQL, err)
		}
		if token.Token(cur) > t {
			return true, &token.StaleError{Resource: resource, Presented: t, Current: token.Token(cur)}
		}
		attempts++
	}
	return true, tb.unstable(op, args[1])
}

func (tb *Table) noRow(op string, key any) error {
	return fmt.Errorf("postgres: %s %s key %v: %w", op, tb.name, key, ErrNoRow)
}

func (tb *Table) unstable(op string, key any) error {
	return fmt.Errorf("postgres: %s %s key %v: the row kept changing under %d attempts", op, tb.name, key, maxAttempts)
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// clauseReturning is the kind of a [Returning] clause.
const clauseReturning = clauseWhere + 1

// Returning makes [Table.Update] return column's value as the Update left
// it, scanned into dest as [Table.Read] scans (any destination pgx's Scan
// takes), in the same statement: a debit reads the new balance without
// a second statement or claim,
//
//	var balance int64
//	err := accounts.Update(ctx, pool, id, t, postgres.Add("balance", -amount),
//		postgres.Where("balance >= $1", amount), postgres.Returning("balance", &balance))
//
// It is PostgreSQL's UPDATE … RETURNING: the row after the assignments,
// the token column holding t. Several Returning clauses scan in their
// order. dest is written only when the Update is accepted; a refusal —
// a [*token.StaleError], [ErrNoRow], a [*ConditionError] — leaves it
// untouched. If dest cannot hold its column, Update returns pgx's scan
// error after the Update was made. [Table.Upsert] does not take it.
func Returning(column string, dest any) Clause {
	return Clause{kind: clauseReturning, column: column, value: dest}
}

// returning validates the [Returning] clauses of set and returns their
// columns and destinations, in order.
func returning(set []Clause) (cols []string, dest []any, err error) {
	for _, a := range set {
		if a.kind != clauseReturning {
			continue
		}
		if err := checkColumn(a.column); err != nil {
			return nil, nil, err
		}
		if _, ok := a.value.(Expression); ok {
			return nil, nil, fmt.Errorf("%w: Returning %q into an Expression (a destination is a pointer)", ErrBadInput, a.column)
		}
		cols, dest = append(cols, a.column), append(dest, a.value)
	}
	return cols, dest, nil
}

// updateShape is the statement text of a plain Update assigning cols and
// returning ret. An empty name separates the two lists in the shape's
// key: no column name is empty.
func (tb *Table) updateShape(cols, ret []string) string {
	if len(ret) == 0 {
		return tb.shape('u', cols, func() string { return tb.updateSQL(cols, nil) })
	}
	k := append(append(append(make([]string, 0, len(cols)+1+len(ret)), cols...), ""), ret...)
	return tb.shape('U', k, func() string { return tb.updateSQL(cols, ret) })
}
