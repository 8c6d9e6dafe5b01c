package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"

	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/enforce"
)

// TableOptions configure [NewTable].
type TableOptions struct {
	// Name of the guarded table: {table} or {database, table}. Required.
	// Tombstones are named by it as written ("items/42" and
	// "shop.items/42" are two marks), so every process guarding one
	// table must give it the same Name, and the same Tokens: a Delete
	// through one spelling does not stop an Upsert through another.
	Name []string

	// Key is the column that identifies a row. Required; it must be
	// unique (a primary key or a unique index). A string column (CHAR,
	// VARCHAR, BINARY, VARBINARY, TEXT, BLOB, ENUM, SET) takes keys
	// that are a string or []byte, and refuses others with [ErrBadInput]:
	// the server would compare its text with a number as a number.
	Key string

	// Token is the column holding the row's high-water mark, BIGINT
	// UNSIGNED NOT NULL DEFAULT 0. Default "fence_token". A column of
	// another type cannot hold every token: the first Update, Read or
	// Upsert finds it and refuses with a [*SchemaError].
	Token string

	// Tokens is the high-water table that keeps the marks of deleted rows
	// ([Table.Delete]). Default: fence_tokens in the connection's
	// database, as [Migrate] creates it.
	Tokens *Tokens

	// Check runs before every operation, with the row's resource name
	// "<Name>/<key>" and the token; a refused token sends nothing. Nil is
	// [token.DefaultCheck], the clock bound; [token.NoCheck] turns
	// checking off.
	Check token.Check

	// LockKey maps a row's key to the key of the lock that guards the row,
	// e.g. [LockKeyPrefix]("sku:") when rows of items are locked as
	// "sku:<id>". An operation given the zero token takes the context's
	// token only when the context carries it for LockKey(key): a token of
	// another lock is refused with an error wrapping [token.ErrMissing]
	// that names both keys, never used. Nil: the lock key is the row's
	// resource name "<Name>/<key>".
	LockKey func(key any) string
}

// Table is a table guarded in column mode: each row carries its own
// high-water mark in a token column, and [Table.Update] checks and
// advances the mark in the statement that makes the access, so a row can
// never be written under a token lower than one it has accepted;
// [Table.Read] claims the row before it reads it.
//
// A row's resource name, which the check is asked about and every
// [*token.StaleError] carries, is "<table name>/<key>": the Name as
// configured, its parts joined by ".", a slash, and the key as text: a
// []byte (or a named byte slice) as its bytes, as the string key column
// stores it, anything else as fmt.Sprint formats it.
//
// A Table is immutable and safe for concurrent use.
type Table struct {
	name    string // as configured, for messages and resource names
	tbl     string // quoted
	key     string // quoted key column
	tok     string // quoted token column
	check   token.Check
	tokens  *Tokens
	rawKey  string           // as configured: the key column, for Verify
	rawTok  string           // as configured: the token column, for checkColumns
	schema  string           // the database part of Name, "" for the connection's
	lockKey func(any) string // nil: the row's resource name

	currentSQL string // key → the row's token

	// keyClass is what checkColumns found: 0 until it passed, then
	// keyString for a string key column, keyOther for any other.
	// Refusals are not remembered: the column may be altered.
	keyClass atomic.Int32

	// keyKind is the key column's kind once Verify found it fit for
	// tombstones (keyInteger or keyBytes); 0 until then. Refusals are not
	// remembered: the column may be altered.
	keyKind atomic.Int32
}

// NewTable returns the guarded table described by o. It fails with an
// error wrapping [ErrBadInput] for missing or unusable names; it does not
// touch the database.
func NewTable(o TableOptions) (*Table, error) {
	if o.Token == "" {
		o.Token = "fence_token"
	}
	tbl, err := quoteName(o.Name)
	if err != nil {
		return nil, err
	}
	if o.Key == "" {
		return nil, fmt.Errorf("%w: TableOptions.Key, the column that identifies a row, is required", ErrBadInput)
	}
	key, err := quoteName([]string{o.Key})
	if err != nil {
		return nil, fmt.Errorf("%w (key column)", err)
	}
	tok, err := quoteName([]string{o.Token})
	if err != nil {
		return nil, fmt.Errorf("%w (token column)", err)
	}
	if strings.EqualFold(o.Key, o.Token) {
		return nil, fmt.Errorf("%w: key and token column are both %q", ErrBadInput, o.Key)
	}
	if o.Tokens == nil {
		o.Tokens = defaultTokens
	}
	tb := &Table{name: strings.Join(o.Name, "."), tbl: tbl, key: key, tok: tok, check: o.Check,
		tokens: o.Tokens, rawKey: o.Key, rawTok: o.Token, lockKey: o.LockKey}
	if len(o.Name) == 2 {
		tb.schema = o.Name[0]
	}
	tb.currentSQL = `SELECT ` + tok + ` FROM ` + tbl + ` WHERE ` + key + ` = ?`
	return tb, nil
}

// LockKeyPrefix returns a [TableOptions.LockKey] for rows whose lock key
// is prefix followed by the row's key as text, as in the row's resource
// name (a []byte as its bytes, anything else as fmt.Sprint formats it):
// LockKeyPrefix("sku:") maps key 42 to "sku:42", and []byte("a") to
// "sku:a", the lock of the string key "a", which names the same row.
//
// The mapping is of the Go value, not of the row: pass keys as Go values
// of the key column's kind (an integer for an integer key), never as the
// text a client sent. MySQL reads the string "01" as row 1 of an integer
// key, while its lock key is "sku:01" — another lock than row 1's
// "sku:1", so a holder of "sku:01" could write row 1 under a lock that
// does not guard it. Parse and canonicalise keys before they reach the
// Table, as the handler must anyway to name the lock it takes.
func LockKeyPrefix(prefix string) func(key any) string {
	return func(key any) string { return prefix + keyName(key) }
}

// keyName is the key as it appears in a row's resource name and lock key:
// a byte slice as the text it holds (fmt.Sprint would write []byte("a")
// as "[97]", the name of another row, while naming row "a" otherwise),
// anything else as fmt.Sprint formats it.
func keyName(key any) string {
	if b, ok := key.([]byte); ok {
		return string(b)
	}
	if v := reflect.ValueOf(key); v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8 {
		return string(v.Bytes())
	}
	return fmt.Sprint(key)
}

// Clause is one clause of [Table.Update]: a column's new value, [Set] or
// [Add], or a condition on the row, [Where].
type Clause struct {
	kind   int
	column string
	value  any    // the value, or the delta of Add
	cond   string // Where's SQL
	args   []any  // Where's arguments
}

// Kinds of [Clause].
const (
	clauseValue     = iota // column = ?
	clauseAdd              // column = column + ?
	clauseWhere            // AND (cond)
	clauseExpr             // column = (sql)
	clauseReturning        // read back after the update
)

// Set assigns value to column. The value is sent as a query parameter,
// whatever it contains — unless it is an [Expression] ([Expr]), SQL of the
// program's own that computes the new value from the row in the same
// statement.
func Set(column string, value any) Clause {
	if e, ok := value.(Expression); ok {
		return Clause{kind: clauseExpr, column: column, cond: e.sql, args: e.args}
	}
	return Clause{kind: clauseValue, column: column, value: value}
}

// Add adds delta to column in the statement: Add("stock", -1) is
// stock = stock - 1 computed from the row as it is. delta is a query
// parameter.
func Add(column string, delta any) Clause {
	return Clause{kind: clauseAdd, column: column, value: delta}
}

// Where adds a condition to [Table.Update], evaluated on the row as it
// was before the statement, next to the token check:
// Update(ctx, db, 42, t, Add("stock", -1), Where("stock >= ?", 1)) sells
// one unit only if there is one. A row whose condition is not true (false
// or NULL) is not assigned, and Update returns a [*ConditionError] — after
// claiming the row for t: evaluating the condition read the row. Several
// Where clauses are joined with AND.
//
// cond is SQL text: a constant of your code, never user input; its
// arguments, one per ?, are query parameters. A fragment that could reach
// outside its own parentheses (an unbalanced parenthesis or quote, a
// semicolon, a comment) or whose ? count differs from len(args) is
// refused with [ErrBadInput] before anything is sent.
func Where(cond string, args ...any) Clause {
	return Clause{kind: clauseWhere, cond: cond, args: args}
}

// ErrNoRow: the guarded row does not exist. Nothing was written. It
// unwraps to [token.ErrNotFound].
var ErrNoRow error = &kindError{"mysql: no such row", token.ErrNotFound}

// ErrTriggers: the guarded table has triggers, and column mode cannot
// guard it. A statement's outcome (written, refused, condition false) comes
// back through LAST_INSERT_ID, which MySQL and MariaDB reset when a
// trigger runs; Update, Upsert and Returning then cannot tell what their
// statement did, and return this: the row may have been written. Guard a
// table with triggers with [Tokens.Tx] (table mode), whose claim does not
// depend on the guarded table.
var ErrTriggers = errors.New("mysql: the table has triggers, which hide a fenced statement's outcome")

// ErrCondition is what every [*ConditionError] unwraps to. It unwraps to
// [token.ErrCondition].
var ErrCondition error = &kindError{"mysql: condition not met", token.ErrCondition}

// kindError is an error value of this package that also matches the
// sentinel of package token for its kind of answer.
type kindError struct {
	msg  string
	kind error
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

// ConditionError reports that [Table.Update]'s token was accepted and its
// [Where] conditions were not true: nothing was assigned, and the row's
// mark was advanced to Token. It unwraps to [ErrCondition].
type ConditionError struct {
	Resource   string      // the row's resource name, "<table>/<key>"
	Conditions []string    // the Where clauses, as written
	Token      token.Token // the token the row was claimed for
}

func (e *ConditionError) Error() string {
	return fmt.Sprintf("mysql: %s: condition not met (%s); the row is claimed for token %d",
		e.Resource, strings.Join(e.Conditions, " AND "), e.Token)
}

func (e *ConditionError) Unwrap() error { return ErrCondition }

// Outcomes of an Update's statement, as its LAST_INSERT_ID(expr) reports
// them; 0 (not set) means no row matched the key.
const (
	outcomeDone      = 1 // accepted, conditions true: assigned
	outcomeCondition = 2 // accepted, a condition not true: only claimed
	outcomeStale     = 3 // refused: the mark is above the token
)

// Update assigns set to the row with key if t is not lower than the row's
// mark, and advances the mark to t, in one statement, one round trip:
//
//	err := items.Update(ctx, db, 42, t, mysql.Add("stock", -1), mysql.Where("stock > 0"))
//
// Refused, it is exactly one of: a [*token.StaleError] (the token is below
// the mark, whatever the conditions), [ErrNoRow], or a [*ConditionError]
// (errors.Is [ErrCondition]) when the token was accepted and a condition
// was not true — then nothing is assigned, but the row is claimed for t.
// The statement itself tells the three apart; a stale refusal then reads
// the mark to report it (a second statement: the mark it reports is at
// least the one that refused).
//
// Update with no Set or Add only claims the row: the fenced form of a
// read's claim, before a read of the row in the same transaction.
//
// Every assignment reads the row as it was: conditions and the token
// check are evaluated before any column changes, an Add reads its own
// column, which no earlier assignment may set, and an [Expr] may not name
// a column assigned before it (MySQL assigns left to right, each
// assignment seeing the ones before).
func (tb *Table) Update(ctx context.Context, db DB, key any, t token.Token, set ...Clause) error {
	for _, c := range set {
		if c.kind == clauseReturning {
			return tb.updateReturning(ctx, db, key, t, set)
		}
	}
	return tb.update(ctx, db, "update", key, t, set)
}

// Read claims the row with key for t and then reads columns into dest:
// the row's mark is advanced to t (a token equal to the mark is accepted:
// one holder, many accesses) and a lower token is refused, exactly as
// [Table.Update] with no assignment. Every access under a lock, reads
// included, must claim: a read that did not could base a write on data a
// newer holder is about to change.
//
// MySQL cannot return rows from an UPDATE, so the read is a second
// statement. On a *sql.Tx both run in the caller's transaction and the
// claim's row lock holds until it ends; on a pool they are two
// statements, and the read sees the row as it is after the claim — if a
// newer holder claimed in between, this holder's next fenced write is
// refused. A row deleted in between is [ErrNoRow].
func (tb *Table) Read(ctx context.Context, db DB, key any, t token.Token, columns []string, dest ...any) error {
	if len(columns) != len(dest) || len(columns) == 0 {
		return fmt.Errorf("%w: %d columns and %d destinations", ErrBadInput, len(columns), len(dest))
	}
	cols := make([]string, len(columns))
	for i, c := range columns {
		q, err := quoteName([]string{c})
		if err != nil {
			return fmt.Errorf("%w (column)", err)
		}
		cols[i] = q
	}
	if err := tb.update(ctx, db, "read", key, t, nil); err != nil {
		return err
	}
	resource := tb.name + "/" + keyName(key)
	q := `SELECT ` + strings.Join(cols, ", ") + ` FROM ` + tb.tbl + ` WHERE ` + tb.key + ` = ?`
	if err := db.QueryRowContext(ctx, q, key).Scan(dest...); err != nil {
		return tb.wrapErr("read", resource, err)
	}
	return nil
}

// update is Update, and Read's claim (op "read", no assignment).
func (tb *Table) update(ctx context.Context, db DB, op string, key any, t token.Token, set []Clause) error {
	resource, t, err := tb.admit(ctx, db, op, key, t)
	if err != nil {
		return err
	}
	if err := tb.checkColumns(ctx, db, key); err != nil {
		return err
	}
	st, err := tb.updateSQL(set)
	if err != nil {
		return err
	}
	return tb.runUpdate(ctx, db, op, resource, key, t, st)
}

// admit checks what every operation gets, resolves the token (the
// context's when t is 0) and runs the check: nothing has been sent yet.
// It returns the row's resource name and the token.
func (tb *Table) admit(ctx context.Context, db DB, op string, key any, t token.Token) (string, token.Token, error) {
	if db == nil {
		return "", 0, fmt.Errorf("%w: nil DB", ErrBadInput)
	}
	if key == nil {
		return "", 0, fmt.Errorf("%w: nil key", ErrBadInput)
	}
	resource := tb.name + "/" + keyName(key)
	lk := resource
	if tb.lockKey != nil && t == 0 {
		lk = tb.lockKey(key)
	}
	t, err := enforce.Resolve(ctx, lk, t)
	if err != nil {
		if tb.lockKey == nil && errors.Is(err, token.ErrMissing) {
			return "", 0, fmt.Errorf("mysql: %s: %w (a row's lock key is its resource name unless TableOptions.LockKey maps its key to the lock that guards it)", op, err)
		}
		return "", 0, fmt.Errorf("mysql: %s: %w", op, err)
	}
	if err := enforce.CheckClaim(resource, t); err != nil {
		return "", 0, fmt.Errorf("mysql: %s: %w", op, err)
	}
	if err := ctx.Err(); err != nil {
		return "", 0, fmt.Errorf("mysql: %s %s: %w", op, resource, err)
	}
	if err := enforce.Admit(ctx, tb.check, resource, t); err != nil {
		return "", 0, fmt.Errorf("mysql: %w", err)
	}
	return resource, t, nil
}

// Classes of key column for checkColumns.
const (
	keyOther  = 1
	keyString = 2
)

// checkColumns checks, once per Table, that the token column is BIGINT
// UNSIGNED, and then that key is of the key column's kind.
//
// A token column of another type cannot hold every token, and outside
// strict sql_mode the server stores a token beyond its range clipped
// (2^63+1000 in a signed BIGINT as 2^63−1): a lower token would then pass
// the clipped mark. So such a column is a [*SchemaError], before anything
// is written.
//
// A string key column compared with a number is compared as a number,
// so "42", " 42" and "042" all match the key 42, and one Update would
// write each of them, reporting the outcome of one. So a string key
// column takes a string or []byte key ([ErrBadInput] otherwise).
//
// When the columns are not found (no such table, a temporary table), it
// checks nothing: the statement itself then reports what is missing.
func (tb *Table) checkColumns(ctx context.Context, db DB, key any) error {
	class := tb.keyClass.Load()
	if class == 0 {
		var err error
		if class, err = tb.readColumns(ctx, db); err != nil || class == 0 {
			return err
		}
	}
	if class != keyString {
		return nil
	}
	v, err := plainKey(key)
	if err != nil {
		return err
	}
	switch rv := reflect.ValueOf(v); {
	case rv.Kind() == reflect.String:
	case rv.Kind() == reflect.Slice && rv.Type().Elem().Kind() == reflect.Uint8:
	default:
		return fmt.Errorf("%w: key %v of Go type %T for the string key column of %s: pass a string or []byte (a number is compared with the column's text as a number, matching several rows)", ErrBadInput, key, key, tb.name)
	}
	return nil
}

// readColumns reads the key and token columns' types for checkColumns;
// 0 with no error when either is not found.
func (tb *Table) readColumns(ctx context.Context, db DB) (int32, error) {
	var keyType, tokType, tokColumn sql.NullString
	err := db.QueryRowContext(ctx, `SELECT MAX(IF(COLUMN_NAME = ?, DATA_TYPE, NULL)),
 MAX(IF(COLUMN_NAME = ?, DATA_TYPE, NULL)), MAX(IF(COLUMN_NAME = ?, COLUMN_TYPE, NULL))
 FROM information_schema.COLUMNS
 WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ?`,
		tb.rawKey, tb.rawTok, tb.rawTok, tb.schema, tb.tableName()).Scan(&keyType, &tokType, &tokColumn)
	if err != nil {
		return 0, tb.wrapErr("check the columns of", tb.name, err)
	}
	if !keyType.Valid || !tokType.Valid {
		return 0, nil
	}
	if t := strings.ToLower(tokType.String); t != "bigint" || !strings.Contains(strings.ToLower(tokColumn.String), "unsigned") {
		return 0, &SchemaError{Object: tb.name,
			Err: fmt.Errorf("token column %s is %s, which cannot hold every token (a token beyond its range is refused, or stored clipped outside strict sql_mode)", tb.rawTok, tokColumn.String),
			Fix: "ALTER TABLE " + tb.tbl + " MODIFY " + tb.tok + " BIGINT UNSIGNED NOT NULL DEFAULT 0"}
	}
	class := int32(keyOther)
	switch strings.ToLower(keyType.String) {
	case "char", "varchar", "binary", "varbinary", "tinytext", "text", "mediumtext", "longtext",
		"tinyblob", "blob", "mediumblob", "longblob", "enum", "set":
		class = keyString
	}
	tb.keyClass.Store(class)
	return class, nil
}

// updateStmt is an Update statement and what its parameters need.
type updateStmt struct {
	text       string
	condArgs   []any
	assignArgs []any
	conds      []string
}

// runUpdate runs st for key and t and turns its outcome into an error.
func (tb *Table) runUpdate(ctx context.Context, db DB, op, resource string, key any, t token.Token, st updateStmt) error {
	u := uint64(t) // BIGINT UNSIGNED: see Tokens' claim
	args := make([]any, 0, len(st.condArgs)+len(st.assignArgs)+3)
	args = append(args, u)
	args = append(args, st.condArgs...)
	args = append(args, u)
	args = append(args, st.assignArgs...)
	args = append(args, key)
	for range maxAttempts {
		res, err := db.ExecContext(ctx, st.text, args...)
		if err != nil {
			return cutOff(ctx, db, tb.wrapErr(op, resource, err))
		}
		outcome, err := res.LastInsertId()
		if err != nil {
			return tb.wrapErr(op, resource, err)
		}
		switch outcome {
		case outcomeDone:
			return nil
		case outcomeCondition:
			return &ConditionError{Resource: resource, Conditions: st.conds, Token: t}
		case 0:
			return tb.noOutcome(ctx, db, op, resource)
		case outcomeStale:
		default:
			return fmt.Errorf("mysql: %s %s: the server reported outcome %d", op, resource, outcome)
		}
		// Refused by a mark above t: read it to report it. A row deleted
		// (or re-created lower) in between makes the refusal out of date:
		// run the statement again.
		var cur uint64
		err = db.QueryRowContext(ctx, tb.currentSQL, key).Scan(&cur)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("mysql: %s %s: refused as stale, and reading the mark failed: %w", op, resource, err)
		}
		if err == nil && token.Token(cur) > t {
			return &token.StaleError{Resource: resource, Presented: t, Current: token.Token(cur)}
		}
	}
	return fmt.Errorf("mysql: %s %s: the row kept changing under %d attempts", op, resource, maxAttempts)
}

// noOutcome tells what an Update's statement that reported no outcome
// means: no row matched the key, unless the table has triggers, after
// which the server reports none whatever happened.
func (tb *Table) noOutcome(ctx context.Context, db DB, op, resource string) error {
	var n int
	err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.TRIGGERS
 WHERE EVENT_OBJECT_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND EVENT_OBJECT_TABLE = ?`,
		tb.schema, tb.tableName()).Scan(&n)
	if err != nil {
		return fmt.Errorf("mysql: %s %s: the statement reported no outcome, and looking for triggers failed: %w", op, resource, err)
	}
	if n > 0 {
		return fmt.Errorf("mysql: %s %s: %w: %s has %d", op, resource, ErrTriggers, tb.name, n)
	}
	return fmt.Errorf("mysql: %s %s: %w", op, resource, ErrNoRow)
}

// updateSQL builds Update's statement, whose parameters are the token,
// condArgs, the token again, assignArgs, then the key. The first assignment decides, on the row as it was, and
// records the outcome with LAST_INSERT_ID(expr) — which the server
// returns in the statement's OK packet, since MySQL has no RETURNING and
// affected rows depend on the client's CLIENT_FOUND_ROWS flag — and sets
// the mark; the other assignments read the outcome back with
// LAST_INSERT_ID(), which returns the value just set in this statement.
func (tb *Table) updateSQL(set []Clause) (updateStmt, error) {
	var condArgs, assignArgs []any
	var conds []string
	var assigns []string
	var assigned []string // raw column names, in order
	for _, c := range set {
		switch c.kind {
		case clauseWhere:
			if err := checkFragment("Where", c.cond, len(c.args)); err != nil {
				return updateStmt{}, err
			}
			conds = append(conds, c.cond)
			condArgs = append(condArgs, c.args...)
		case clauseReturning:
			// read back by updateReturning, after the statement
		case clauseValue, clauseAdd, clauseExpr:
			col, err := quoteName([]string{c.column})
			if err != nil {
				return updateStmt{}, fmt.Errorf("%w (column)", err)
			}
			if col == tb.tok || col == tb.key || strings.EqualFold(col, tb.tok) || strings.EqualFold(col, tb.key) {
				return updateStmt{}, fmt.Errorf("%w: Update assigns to the key or token column %s", ErrBadInput, c.column)
			}
			for _, a := range assigned {
				if strings.EqualFold(a, c.column) {
					return updateStmt{}, fmt.Errorf("%w: Update assigns %s twice", ErrBadInput, c.column)
				}
			}
			val := "?"
			switch c.kind {
			case clauseValue:
				assignArgs = append(assignArgs, c.value)
			case clauseAdd:
				val = col + " + ?"
				assignArgs = append(assignArgs, c.value)
			case clauseExpr:
				if err := tb.checkExpr(c, assigned); err != nil {
					return updateStmt{}, err
				}
				val = "(" + c.cond + ")"
				assignArgs = append(assignArgs, c.args...)
			}
			assigns = append(assigns, col+" = IF(LAST_INSERT_ID() = 1, "+val+", "+col+")")
			assigned = append(assigned, c.column)
		default:
			return updateStmt{}, fmt.Errorf("%w: unknown clause", ErrBadInput)
		}
	}
	cond := "TRUE"
	if len(conds) > 0 {
		cond = "(" + strings.Join(conds, ") AND (") + ")"
	}
	var b strings.Builder
	b.WriteString(`UPDATE ` + tb.tbl + ` SET ` + tb.tok + ` = IF(LAST_INSERT_ID(IF(` + tb.tok + ` > ?, 3, IF(COALESCE(` + cond + `, FALSE), 1, 2))) = 3, ` + tb.tok + `, ?)`)
	for _, a := range assigns {
		b.WriteString(", " + a)
	}
	b.WriteString(` WHERE ` + tb.key + ` = ?`)
	return updateStmt{text: b.String(), condArgs: condArgs, assignArgs: assignArgs, conds: conds}, nil
}

// checkFragment refuses a Where or Expr fragment that could reach
// outside its own parentheses, or whose placeholders do not match its
// arguments.
func checkFragment(what, s string, nargs int) error {
	depth, marks := 0, 0
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		if quote != 0 {
			switch {
			case c == '\\' || c == 0:
				// Whether a backslash escapes depends on the session's
				// sql_mode (NO_BACKSLASH_ESCAPES): refused, so that where
				// a quote ends never does.
				return fmt.Errorf("%w: %s %q holds a backslash or NUL in a quoted part", ErrBadInput, what, s)
			case c == quote:
				if i+1 < len(s) && s[i+1] == quote {
					i++ // doubled quote
				} else {
					quote = 0
				}
			}
			continue
		}
		switch c {
		case '\'', '"', '`':
			quote = c
		case '(':
			depth++
		case ')':
			depth--
			if depth < 0 {
				return fmt.Errorf("%w: %s %q closes a parenthesis it did not open", ErrBadInput, what, s)
			}
		case 0, '\\':
			return fmt.Errorf("%w: %s %q holds a backslash or NUL", ErrBadInput, what, s)
		case ';', '#':
			return fmt.Errorf("%w: %s %q holds %q", ErrBadInput, what, s, c)
		case '-', '/':
			if i+1 < len(s) && ((c == '-' && s[i+1] == '-') || (c == '/' && s[i+1] == '*')) {
				return fmt.Errorf("%w: %s %q holds a comment", ErrBadInput, what, s)
			}
		case '?':
			marks++
		}
	}
	switch {
	case quote != 0:
		return fmt.Errorf("%w: %s %q leaves a quote open", ErrBadInput, what, s)
	case depth != 0:
		return fmt.Errorf("%w: %s %q leaves a parenthesis open", ErrBadInput, what, s)
	case strings.TrimSpace(s) == "":
		return fmt.Errorf("%w: empty %s", ErrBadInput, what)
	case marks != nargs:
		return fmt.Errorf("%w: %s %q has %d placeholders and %d arguments", ErrBadInput, what, s, marks, nargs)
	}
	return nil
}

// wrapErr classifies a failed statement on the guarded table.
func (tb *Table) wrapErr(op, resource string, err error) error {
	switch serverErr(err) {
	case erNoSuchTable, erBadDB:
		return &SchemaError{Object: tb.name, Err: err}
	case erBadField:
		return &SchemaError{Object: tb.name, Err: err,
			Fix: "check the column names; a missing token column is added with ALTER TABLE " + tb.tbl + " ADD COLUMN " + tb.tok + " BIGINT UNSIGNED NOT NULL DEFAULT 0"}
	case erLockDeadlock:
		return fmt.Errorf("mysql: %s %s: %w: %w", op, resource, ErrDeadlock, err)
	case erLockWaitTimeout:
		return fmt.Errorf("mysql: %s %s: %w: %w", op, resource, ErrLockTimeout, err)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("mysql: %s %s: %w", op, resource, ErrNoRow)
	}
	return fmt.Errorf("mysql: %s %s: %w", op, resource, err)
}
