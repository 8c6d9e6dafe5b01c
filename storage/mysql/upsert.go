package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/fenceguard/fenceguard/token"
)

// erDupEntry is ER_DUP_ENTRY: a row with the key exists.
const erDupEntry = 1062

// maxAttempts bounds how often Upsert goes round between its update and
// its insert while other writers keep inserting and deleting the row.
const maxAttempts = 8

// Upsert updates the row with key like [Table.Update], or, if there is no
// such row, inserts it with key, the token and set (other columns get
// their defaults). set holds [Set] clauses only: the row may not exist,
// so there is nothing for an [Add] or a [Where] to read. The key column
// needs a unique index.
//
// Refused, it is exactly one of a [*token.StaleError] — the token is
// below the row's mark or, with no row, below the key's tombstone — or an
// error saying why the statement could not run; it never returns
// [ErrNoRow] or a [*ConditionError].
//
// The insert path first claims the key's tombstone in the high-water
// table (resource "<table name>/<key as text>"), which [Table.Delete]
// leaves behind, then inserts the row, in one transaction: a deleted row
// cannot be re-created by a holder whose token is lower than the deleting
// one. That claim stays in the high-water table, so each key ever
// inserted through Upsert costs a row there. The insert path needs a key
// column fit for tombstones ([Table.Verify]) and a *sql.DB, *sql.Conn or
// *sql.Tx; an update of an existing row needs neither, and costs one
// statement outside any transaction.
//
// On a *sql.DB or *sql.Conn the insert path runs in a transaction of its
// own, run again when InnoDB picks it as a deadlock victim (under
// REPEATABLE READ, inserts of neighbouring keys can be: each holds the
// gap the other inserts into). On a
// *sql.Tx it runs in the caller's transaction, from a savepoint that a
// refusal rolls back to, and a deadlock comes back as an error wrapping
// [ErrDeadlock]: InnoDB rolled the whole transaction back. Either way a
// refused Upsert leaves nothing behind, neither row nor tombstone.
//
// A key its column cannot hold, which a server outside strict sql_mode
// stores altered with a warning (300 in a TINYINT as 127, a string cut
// to the column's length), is refused with [ErrBadInput]: the insert
// reads the row back by the key as given, and rolls back when it finds
// none, so the row is never created under a key its tombstone does not
// name.
func (tb *Table) Upsert(ctx context.Context, db DB, key any, t token.Token, set ...Clause) error {
	resource, t, err := tb.admit(ctx, db, "upsert", key, t)
	if err != nil {
		return err
	}
	if err := tb.checkColumns(ctx, db, key); err != nil {
		return err
	}
	var cols []string
	var vals []any
	for _, c := range set {
		if c.kind != clauseValue {
			return fmt.Errorf("%w: Upsert takes Set clauses only (no Add or Where: the row may not exist)", ErrBadInput)
		}
		col, err := quoteName([]string{c.column})
		if err != nil {
			return fmt.Errorf("%w (column)", err)
		}
		for _, seen := range cols {
			if strings.EqualFold(seen, col) {
				return fmt.Errorf("%w: Upsert assigns %s twice", ErrBadInput, c.column)
			}
		}
		cols, vals = append(cols, col), append(vals, c.value)
	}
	st, err := tb.updateSQL(set) // refuses the key and token columns
	if err != nil {
		return err
	}
	// The common case, an existing row, needs no tombstone.
	err = retryDeadlock(ctx, db, func() error { return tb.runUpdate(ctx, db, "upsert", resource, key, t, st) })
	if !errors.Is(err, ErrNoRow) {
		return err
	}
	tomb, err := tb.verifiedTombstone(ctx, db, key)
	if err != nil {
		return err
	}
	ins := `INSERT INTO ` + tb.tbl + ` (` + tb.key + `, ` + tb.tok
	for _, c := range cols {
		ins += `, ` + c
	}
	ins += `) VALUES (?, ?` + strings.Repeat(`, ?`, len(cols)) + `)`
	insArgs := append([]any{key, uint64(t)}, vals...)
	back := `SELECT 1 FROM ` + tb.tbl + ` WHERE ` + tb.key + ` = ?`
	return inTx(ctx, db, "upsert", func(tx DB) error {
		for range maxAttempts {
			// The tombstone first: its lock serializes the insert paths
			// and Deletes of the key, taken in the order Delete takes them
			// (tombstone, then row), so none of them deadlock each other.
			// A claim refused still locks it; the row decides while it
			// exists.
			tombErr := tb.tokens.claim(ctx, tx, tomb, t)
			var se *token.StaleError
			if tombErr != nil && !errors.As(tombErr, &se) {
				return tombErr
			}
			err := tb.runUpdate(ctx, tx, "upsert", resource, key, t, st)
			if !errors.Is(err, ErrNoRow) {
				return err
			}
			if se != nil {
				return &token.StaleError{Resource: resource, Presented: t, Current: se.Current}
			}
			_, err = tx.ExecContext(ctx, ins, insArgs...)
			if serverErr(err) == erDupEntry {
				continue // inserted meanwhile: update it under the check
			}
			if err != nil {
				return tb.wrapErr("upsert", resource, err)
			}
			// Outside strict sql_mode the server stores a key its column
			// cannot hold altered, with a warning (300 in a TINYINT is
			// 127, a long string is cut short): a row the tombstone just
			// claimed does not name. Read it back by the key as given;
			// an error rolls the insert and the claim back.
			var one int
			err = tx.QueryRowContext(ctx, back, key).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("%w: key %v does not fit the key column of %s: the server stored it altered (sql_mode without strict mode)", ErrBadInput, key, tb.name)
			}
			if err != nil {
				return tb.wrapErr("upsert", resource, err)
			}
			return nil
		}
		return fmt.Errorf("mysql: upsert %s: the row kept appearing and disappearing under %d attempts", resource, maxAttempts)
	})
}
