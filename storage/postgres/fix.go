package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/enforce"
)

// wrapErr is [wrapErr] for a statement sql of tb ("" when unknown): a
// [*SchemaError] says which of the table's pieces is missing and what sets
// it up.
func (tb *Table) wrapErr(op, sql string, err error) error {
	return wrapFix(op, tb.name, err, func(pgErr *pgconn.PgError) string { return tb.fix(pgErr, sql) })
}

// fix says how to set up what pgErr, an error of the statement sql ("" when
// unknown), says tb lacks; "" when it cannot tell.
func (tb *Table) fix(pgErr *pgconn.PgError, sql string) string {
	switch pgErr.Code {
	case "42P01", "3F000": // undefined_table, invalid_schema_name
		if tb.missingTokens(pgErr, sql) {
			return tb.tokens.migrateFix()
		}
		return tb.tableFix()
	case "42703": // undefined_column
		col := ""
		if pgErr.Position > 0 && sql != "" {
			col, _ = identAt(sql, int(pgErr.Position))
		}
		switch {
		case col == tb.rawTok, col == "" && names(pgErr, tb.rawTok):
			return tb.tokenColumnFix()
		case col == tb.rawKey, col == "" && names(pgErr, tb.rawKey):
			return tb.keyColumnFix()
		}
	case "42P10": // no unique index for ON CONFLICT
		return fmt.Sprintf("create a unique index (or primary key) on %s (%s): Upsert needs one", tb.name, tb.rawKey)
	case "42883", "42804": // undefined_function, datatype_mismatch
		if names(pgErr, tb.rawTok) || tb.tokenAt(pgErr, sql) {
			return tb.tokenTypeFix()
		}
	}
	return ""
}

// missingTokens reports whether the missing relation of pgErr is the
// high-water table rather than the guarded table: the server names it in
// its message, and its position in sql points at it.
func (tb *Table) missingTokens(pgErr *pgconn.PgError, sql string) bool {
	if names(pgErr, tb.tokens.name) {
		return true
	}
	if names(pgErr, tb.name) || pgErr.Position <= 0 || sql == "" {
		return false
	}
	id, ok := identAt(sql, int(pgErr.Position))
	return ok && id != lastPart(tb.name) && id == lastPart(tb.tokens.name)
}

// tokenAt reports whether the server's error position in sql is the
// comparison right after the token column, as in "fence_token" <= $1.
func (tb *Table) tokenAt(pgErr *pgconn.PgError, sql string) bool {
	if pgErr.Position <= 0 || sql == "" {
		return false
	}
	r := []rune(sql)
	pos := int(pgErr.Position) - 1
	if pos > len(r) {
		return false
	}
	return strings.HasSuffix(strings.TrimRight(string(r[:pos]), " "), tb.tok)
}

func lastPart(name string) string { return name[strings.LastIndexByte(name, '.')+1:] }

func (tb *Table) tableFix() string {
	return fmt.Sprintf("create table %s, or correct TableOptions.Name (a schema name, or the search_path)", tb.name)
}

func (tb *Table) tokenColumnFix() string {
	return fmt.Sprintf("run Table.AddTokenColumn, which adds %s bigint not null default 0 to %s (or set TableOptions.Token to the table's token column)", tb.rawTok, tb.name)
}

func (tb *Table) keyColumnFix() string {
	return fmt.Sprintf("set TableOptions.Key to the column that identifies a row of %s", tb.name)
}

func (tb *Table) tokenTypeFix() string {
	return fmt.Sprintf("make %s.%s bigint not null default 0 (ALTER TABLE … ALTER COLUMN %s TYPE bigint); Table.AddTokenColumn checks it", tb.name, tb.rawTok, tb.tok)
}

// keyTypeFix is the fix of a [*KeyTypeError].
const keyTypeFix = "Read and Update work with any key type; for Delete and Upsert, key the table by a column of one of the types above"

// lockMismatch returns the refusal of a zero token for the lock key lk
// when ctx carries the tokens of other locks and none of lk, nil
// otherwise. A token is
// meaningful only with the key it was granted for, so it is never used
// for another; the error says how to make the two keys agree. where
// describes the call ("update items/7"), hint(ck) what names lk.
func lockMismatch(ctx context.Context, where, lk string, t token.Token, hint func(ck string) string) error {
	if t != 0 {
		return nil
	}
	if _, err := enforce.Resolve(ctx, lk, 0); err == nil {
		return nil // the context carries lk's own token, or none
	}
	ck, ct, ok := token.FromContext(ctx)
	if !ok || ct == 0 || ck == lk {
		return nil
	}
	return fmt.Errorf("postgres: %s: %w: the context carries the token of lock %q, and the lock key here is %q: %s",
		where, token.ErrMissing, ck, lk, hint(ck))
}

// lockKeyHint says how to make a row's lock key lk agree with the lock
// ck whose token the context carries.
func (tb *Table) lockKeyHint(ck, lk string, key any) string {
	if tb.lockKey != nil {
		return fmt.Sprintf("TableOptions.LockKey maps this row's key to %q; make it and the key of the lock the caller takes (the route's key) name the same lock", lk)
	}
	s := "TableOptions.LockKey is not set, so a row's lock key is its resource name; set LockKey to map a row's key to the key of the lock that guards the row"
	if k, err := keyText(key); err == nil && k != "" && strings.HasSuffix(ck, k) {
		s += fmt.Sprintf(", e.g. LockKeyPrefix(%q)", strings.TrimSuffix(ck, k))
	}
	return s
}

func txHint(string) string {
	return `a fenced transaction's resource is the key of the lock whose token it uses: pass that key, or "" for the context's`
}

func fenceHint(string) string {
	return "claim the key the lock was granted for (the route's key)"
}
