package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fenceguard/fenceguard/token"
)

// Expression is an SQL expression over the row, with its arguments: the
// new value of a column in [Set], made with [Expr].
type Expression struct {
	sql  string
	args []any
}

// Expr returns the SQL expression sql, whose placeholders $1, $2, … stand
// for args, as the new value of a column: Set("stock", Expr("stock - $1",
// n)). Column references in it see the row as it was before the statement,
// as everywhere in an UPDATE.
//
// sql is SQL text that runs on the server: write it as a constant in your
// code, never from user input. The arguments are values: they are sent as
// query parameters, whatever they contain. The placeholders are renumbered
// into the statement's own; sql must use each of $1 … $len(args), and
// nothing else. So that a fragment stays one expression, a fragment that
// could reach outside its parentheses is refused with [ErrBadInput]
// before anything is sent: one with unbalanced parentheses or quotes, a
// semicolon, a comment, a backslash, a dollar sign other than a
// placeholder (no dollar quoting), or a NUL byte. Literal strings in
// single quotes are fine; values belong in args.
func Expr(sql string, args ...any) Expression { return Expression{sql, args} }

// Kinds of [Clause].
const (
	clauseValue = iota // column = $n
	clauseExpr         // column = (sql)
	clauseAdd          // column = column + $n
	clauseWhere        // AND (sql)
)

// Add adds delta to column, in the statement: Add("stock", -1) is
// "stock" = "stock" + $n. delta is a query parameter, and it takes the
// column's type.
func Add(column string, delta any) Clause {
	return Clause{kind: clauseAdd, column: column, value: delta}
}

// Where adds a condition to [Table.Update], next to the token check, in
// the same statement: Update(ctx, db, 42, t, Add("stock", -1),
// Where("stock >= $1", 1)) sells one unit only if there is one. A row
// whose condition is not true (false or NULL) is not assigned, and Update
// returns a [*ConditionError] (errors.Is [ErrCondition]) — after claiming
// the row for t, as [Table.Read] would: evaluating the condition read the
// row. A stale token is still a [*token.StaleError], whatever the
// condition; a missing row is still [ErrNoRow].
//
// cond is SQL text, like [Expr]'s: a constant of your code, never user
// input; its arguments are values, sent as query parameters. The same
// rules apply ($1 … $len(args), one expression), and several Where
// clauses are joined with AND.
func Where(cond string, args ...any) Clause {
	return Clause{kind: clauseWhere, value: Expression{cond, args}}
}

// ErrCondition is what every [*ConditionError] unwraps to. It unwraps to
// [token.ErrCondition].
var ErrCondition error = &kindError{"postgres: condition not met", token.ErrCondition}

// ConditionError reports that [Table.Update] found the row and accepted
// the token, but a [Where] condition was not true: nothing was assigned.
// The row was claimed for Token (its mark is Token now), so a holder with
// a lower token cannot change the row this holder has just seen fail the
// condition.
type ConditionError struct {
	Resource   string      // the row's resource name, "<table>/<key>"
	Conditions []string    // the Where clauses, as written
	Token      token.Token // the token the row was claimed for
}

func (e *ConditionError) Error() string {
	return fmt.Sprintf("postgres: update %s: condition not met (%s); nothing assigned, claimed for token %d",
		e.Resource, strings.Join(e.Conditions, " AND "), e.Token)
}

func (e *ConditionError) Unwrap() error { return ErrCondition }

// ColumnError reports that a statement of a [Table] named a column the
// table does not have: a typo in [Set], [Add] or [Table.Read]'s columns,
// or in an [Expr] or [Where] fragment. The statement failed as a whole:
// nothing was written and no mark moved. It unwraps to [ErrSchema] and
// to the server's error. When the missing column is the
// Table's own key or token column, the error is a [*SchemaError] (the
// table is not set up for fencing) with the ColumnError as its cause.
type ColumnError struct {
	Table  string // as configured, e.g. "public.items"
	Column string // as the server resolved it: an unquoted name folded to lower case
	Err    error  // the server's *pgconn.PgError
}

func (e *ColumnError) Error() string {
	return fmt.Sprintf("postgres: table %s has no column %q", e.Table, e.Column)
}

func (e *ColumnError) Unwrap() []error { return []error{ErrSchema, e.Err} }

// checkedFragment checks e's arguments and renumbers its placeholders
// from first ([fragment]).
func checkedFragment(e Expression, first int) (string, error) {
	if err := checkArgs(e); err != nil {
		return "", err
	}
	return fragment(e.sql, len(e.args), first)
}

// fragment checks an SQL fragment of [Expr] or [Where] and returns it with
// its placeholders $1…$nargs renumbered to start at $base. It reads the
// fragment as PostgreSQL's lexer would only as far as it must — quoted
// strings and identifiers, placeholders, parentheses — and refuses
// everything where its reading and the server's could differ (a
// backslash: escape strings and standard_conforming_strings; a dollar
// sign: dollar quoting, identifiers containing $) or that could end the
// expression early (an unbalanced parenthesis or quote, a semicolon, a
// comment).
func fragment(sql string, nargs, base int) (string, error) {
	bad := func(format string, a ...any) (string, error) {
		return "", fmt.Errorf("%w: SQL fragment %q: %s", ErrBadInput, sql, fmt.Sprintf(format, a...))
	}
	if strings.TrimSpace(sql) == "" {
		return bad("empty")
	}
	var b strings.Builder
	used := make([]bool, nargs)
	depth := 0
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == 0:
			return bad("contains a NUL byte")
		case c == '\\':
			return bad("contains a backslash (pass the value as an argument)")
		case c == ';':
			return bad("contains a semicolon (one expression only)")
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-', c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			return bad("contains a comment")
		case c == '\'' || c == '"':
			j := i + 1
			for {
				k := strings.IndexByte(sql[j:], c)
				if k < 0 {
					return bad("unterminated %c quote", c)
				}
				j += k + 1
				if j < len(sql) && sql[j] == c { // a doubled quote
					j++
					continue
				}
				break
			}
			if strings.IndexByte(sql[i:j], 0) >= 0 {
				return bad("contains a NUL byte")
			}
			if c == '\'' && strings.IndexByte(sql[i:j], '\\') >= 0 {
				// With standard_conforming_strings off, or in an E''
				// string, it escapes the quote: the server would read
				// the string's end elsewhere.
				return bad("contains a backslash in a string (pass the value as an argument)")
			}
			b.WriteString(sql[i:j])
			i = j
			continue
		case c == '$':
			j := i + 1
			for j < len(sql) && sql[j] >= '0' && sql[j] <= '9' {
				j++
			}
			if j == i+1 || (i > 0 && wordByte(sql[i-1])) || (j < len(sql) && (wordByte(sql[j]) || sql[j] == '$')) {
				return bad("$ only as a placeholder $1 … $%d", nargs)
			}
			n, err := strconv.Atoi(sql[i+1 : j])
			if err != nil || n < 1 || n > nargs {
				return bad("placeholder %s, but %d arguments", sql[i:j], nargs)
			}
			used[n-1] = true
			b.WriteString("$" + strconv.Itoa(base+n-1))
			i = j
			continue
		case c == '(':
			depth++
		case c == ')':
			if depth--; depth < 0 {
				return bad("unbalanced parentheses")
			}
		}
		b.WriteByte(c)
		i++
	}
	if depth != 0 {
		return bad("unbalanced parentheses")
	}
	for n, u := range used {
		if !u {
			return bad("argument %d is not used ($%d)", n+1, n+1)
		}
	}
	return b.String(), nil
}

// wordByte reports whether c can be part of an identifier or a number.
func wordByte(c byte) bool {
	return c == '_' || c >= 0x80 || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// exprShape is the statement text of an Update with expressions or
// conditions: update, with $1 token, $2 key, then every clause's
// arguments in order; and, with conditions, miss, the failure path's
// claim, with $1 token, $2 key, then the conditions' arguments. spans are
// the fragments' places in update (in characters, as the server's error
// positions count), to say which fragment an error is about.
type exprShape struct {
	update, miss string
	conds        []string
	spans        []span
}

type span struct {
	from, to int // 1-based character positions, to exclusive
	sql      string
}

// exprShape returns the statement texts for set, building and caching
// them on first use. Every fragment is checked on every call, before the
// cache is looked up, and the cache key spells each part with its length:
// no fragment, whatever it contains, finds the statement of another set.
func (tb *Table) exprShape(set []Clause) (*exprShape, error) {
	var k []byte
	for _, a := range set {
		k = appendPart(append(k, byte('0'+a.kind)), a.column)
		if e, ok := a.value.(Expression); ok && a.kind != clauseValue {
			if _, err := checkedFragment(e, 1); err != nil {
				return nil, err
			}
			k = strconv.AppendInt(appendPart(append(k, 'e'), e.sql), int64(len(e.args)), 10)
		}
		k = append(k, '.')
	}
	key := string(k)
	tb.mu.Lock()
	x, ok := tb.exprs[key]
	tb.mu.Unlock()
	if ok {
		return x, nil
	}
	x, err := tb.buildExpr(set)
	if err != nil {
		return nil, err
	}
	tb.mu.Lock()
	if len(tb.exprs) < maxShapes {
		tb.exprs[key] = x
	}
	tb.mu.Unlock()
	return x, nil
}

// appendPart appends s to k as its length, a colon and its bytes.
func appendPart(k []byte, s string) []byte {
	return append(append(strconv.AppendInt(k, int64(len(s)), 10), ':'), s...)
}

func (tb *Table) buildExpr(set []Clause) (*exprShape, error) {
	x := &exprShape{}
	var b, where, miss strings.Builder
	b.WriteString(`UPDATE ` + tb.tbl + ` SET ` + tb.tok + ` = $1::bigint`)
	n := 3     // the next placeholder of update
	m := 3     // the next placeholder of miss
	chars := 0 // characters in b so far, for spans
	add := func(s string) { b.WriteString(s); chars += utf8.RuneCountInString(s) }
	chars = utf8.RuneCountInString(b.String())
	var whereSpans []span // positions relative to where's start
	wchars := 0
	for _, a := range set {
		switch a.kind {
		case clauseValue:
			add(`, ` + quote(a.column) + ` = $` + strconv.Itoa(n))
			n++
		case clauseAdd:
			q := quote(a.column)
			add(`, ` + q + ` = ` + q + ` + $` + strconv.Itoa(n))
			n++
		case clauseExpr:
			e := a.value.(Expression)
			f, err := checkedFragment(e, n)
			if err != nil {
				return nil, err
			}
			add(`, ` + quote(a.column) + ` = (`)
			x.spans = append(x.spans, span{chars + 1, chars + 1 + utf8.RuneCountInString(f), e.sql})
			add(f + `)`)
			n += len(e.args)
		case clauseWhere:
			e := a.value.(Expression)
			f, err := checkedFragment(e, n)
			if err != nil {
				return nil, err
			}
			g, _ := fragment(e.sql, len(e.args), m)
			where.WriteString(` AND (`)
			wchars += 6
			whereSpans = append(whereSpans, span{wchars + 1, wchars + 1 + utf8.RuneCountInString(f), e.sql})
			where.WriteString(f + `)`)
			wchars += utf8.RuneCountInString(f) + 1
			if miss.Len() > 0 {
				miss.WriteString(` AND `)
			}
			miss.WriteString(`(` + g + `)`)
			x.conds = append(x.conds, e.sql)
			n += len(e.args)
			m += len(e.args)
		}
	}
	add(` WHERE ` + tb.key + ` = $2 AND ` + tb.tok + ` <= $1::bigint`)
	for _, s := range whereSpans {
		x.spans = append(x.spans, span{s.from + chars, s.to + chars, s.sql})
	}
	add(where.String() + ` RETURNING true`)
	for _, a := range set {
		if a.kind == clauseReturning {
			add(`, ` + quote(a.column))
		}
	}
	x.update = b.String()
	if len(x.conds) > 0 {
		// The row's mark is claimed when the token is accepted and the
		// conditions are not true (false or NULL), in one statement: the
		// condition and the check see the same, newest, row version. The
		// same statement reads the row's mark as of its snapshot, so that
		// a refusal is told apart in this one round trip whenever the two
		// agree (see [Table.updateExpr]).
		x.miss = `WITH fenceguard_m AS (UPDATE ` + tb.tbl + ` SET ` + tb.tok + ` = $1::bigint WHERE ` + tb.key + ` = $2 AND ` + tb.tok +
			` <= $1::bigint AND (` + miss.String() + `) IS NOT TRUE RETURNING true)
SELECT EXISTS (SELECT FROM fenceguard_m), (SELECT ` + tb.tok + ` FROM ` + tb.tbl + ` WHERE ` + tb.key + ` = $2)`
	}
	return x, nil
}

// checkArgs refuses an Expression among a fragment's arguments: they are
// values.
func checkArgs(e Expression) error {
	for i, a := range e.args {
		if _, ok := a.(Expression); ok {
			return fmt.Errorf("%w: SQL fragment %q: argument %d is an Expression (arguments are values)", ErrBadInput, e.sql, i+1)
		}
	}
	return nil
}

// exprArgs returns the arguments of x.update.
func exprArgs(set []Clause, v int64, key any) []any {
	update := make([]any, 2, 2+len(set))
	update[0], update[1] = v, key
	for _, a := range set {
		switch a.kind {
		case clauseValue, clauseAdd:
			update = append(update, a.value)
		case clauseExpr, clauseWhere:
			update = append(update, a.value.(Expression).args...)
		}
	}
	return update
}

// missArgs returns the arguments of x.miss.
func missArgs(set []Clause, v int64, key any) []any {
	miss := []any{v, key}
	for _, a := range set {
		if a.kind == clauseWhere {
			miss = append(miss, a.value.(Expression).args...)
		}
	}
	return miss
}

// updateExpr runs an Update with expressions or conditions. Accepted, it
// is the one statement x.update. When that matches nothing, the failure
// path tells the outcomes apart, in one more statement as a rule: x.miss
// claims the row if the token is accepted and the conditions are not true
// (a [*ConditionError]), and reads the row's mark as of its snapshot.
//
// When x.miss claims nothing, its read decides only where it cannot
// disagree with its write. Under READ COMMITTED the write follows the row
// to its newest version while the read sees the statement's snapshot;
// but both scan that one snapshot for the row, so a row absent from it is
// no row for either ([ErrNoRow]), and a snapshot mark above t is stale
// (marks only rise, so the row's mark now is at least as high; the error
// carries the snapshot's, which is above t as a StaleError's must be).
// A snapshot mark at or below t, with nothing claimed, means the row
// changed after the snapshot — a newer mark, the conditions true now, a
// delete — and then, as in [Table.claim], the row is read with a fresh
// snapshot: no row, a higher mark (stale), or — the conditions hold now,
// or the row was re-created lower — the Update runs again.
func (tb *Table) updateExpr(ctx context.Context, db DB, x *exprShape, set []Clause, key any, resource string, t token.Token, v int64, dest []any) error {
	args := exprArgs(set, v, key)
	if x.miss == "" {
		found, err := tb.claim(ctx, db, "update", x.update, args, resource, t, dest, x)
		if err == nil && !found {
			err = tb.noRow("update", key)
		}
		return err
	}
	for attempts, retries := 0, 0; attempts < maxAttempts; {
		err := db.QueryRow(ctx, x.update, args...).Scan(append([]any{new(bool)}, dest...)...)
		if err == nil {
			return nil
		}
		if retriable(db, err) && retries < maxSerializationRetries && ctx.Err() == nil {
			retries++
			continue
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return tb.wrap("update", x.update, x, err)
		}
		var (
			claimed bool
			mark    *int64 // as of x.miss's snapshot; nil: no such row
		)
		err = db.QueryRow(ctx, x.miss, missArgs(set, v, key)...).Scan(&claimed, &mark)
		if retriable(db, err) && retries < maxSerializationRetries && ctx.Err() == nil {
			retries++
			continue
		}
		if err != nil {
			return tb.wrap("update", x.miss, nil, err)
		}
		switch {
		case claimed:
			return &ConditionError{Resource: resource, Conditions: x.conds, Token: t}
		case mark == nil:
			return tb.noRow("update", key)
		case token.Token(*mark) > t:
			return &token.StaleError{Resource: resource, Presented: t, Current: token.Token(*mark)}
		}
		var cur int64
		err = db.QueryRow(ctx, tb.currentSQL, key).Scan(&cur)
		if errors.Is(err, pgx.ErrNoRows) {
			return tb.noRow("update", key)
		}
		if err != nil {
			return tb.wrap("update", tb.currentSQL, nil, err)
		}
		if token.Token(cur) > t {
			return &token.StaleError{Resource: resource, Presented: t, Current: token.Token(cur)}
		}
		attempts++
	}
	return tb.unstable("update", key)
}

// wrap classifies a failed statement sql of tb: an unknown column is a
// [*ColumnError] (a [*SchemaError] around it when it is the key or the
// token column), an error inside a fragment of x names the fragment, and
// the rest is [wrapErr]'s. The server's error position (in characters of
// sql) says where the error is.
func (tb *Table) wrap(op, sql string, x *exprShape, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Position <= 0 {
		return tb.wrapErr(op, sql, err)
	}
	pos := int(pgErr.Position)
	if pgErr.Code == "42703" { // undefined_column
		if col, ok := identAt(sql, pos); ok {
			ce := &ColumnError{Table: tb.name, Column: col, Err: err}
			if col == tb.rawKey || col == tb.rawTok {
				return &SchemaError{Object: tb.name, Err: ce, Fix: tb.fix(pgErr, sql)}
			}
			return ce
		}
	}
	if x != nil {
		for _, s := range x.spans {
			if pos >= s.from && pos < s.to {
				return fmt.Errorf("postgres: %s %s: in SQL fragment %q: %w", op, tb.name, s.sql, err)
			}
		}
	}
	return tb.wrapErr(op, sql, err)
}

// identAt returns the column name at the 1-based character position pos of
// sql: a quoted identifier as is, an unquoted one folded to lower case,
// the last part of a qualified name.
func identAt(sql string, pos int) (string, bool) {
	r := []rune(sql)
	i := pos - 1
	if i < 0 || i >= len(r) {
		return "", false
	}
	var name string
	for {
		if r[i] == '"' {
			var b strings.Builder
			j := i + 1
			for ; j < len(r); j++ {
				if r[j] == '"' {
					if j+1 < len(r) && r[j+1] == '"' {
						b.WriteRune('"')
						j++
						continue
					}
					break
				}
				b.WriteRune(r[j])
			}
			if j >= len(r) {
				return "", false
			}
			name, i = b.String(), j+1
		} else {
			j := i
			for j < len(r) && (r[j] >= 0x80 || wordByte(byte(r[j])) || r[j] == '$') {
				j++
			}
			if j == i {
				return "", false
			}
			name, i = asciiLower(string(r[i:j])), j
		}
		if i+1 < len(r) && r[i] == '.' {
			i++
			continue
		}
		return name, name != ""
	}
}

// asciiLower folds ASCII letters to lower case, as PostgreSQL folds
// unquoted identifiers in a multibyte encoding.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
