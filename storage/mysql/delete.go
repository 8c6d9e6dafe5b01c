package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/fenceguard/fenceguard/token"
)

// Delete deletes the row with key if t is not lower than its mark. The
// mark does not go with the row: Delete records it, raised to t, as the
// key's tombstone in the high-water table (resource "<table name>/<key as
// text>"), in the same transaction, and [Table.Upsert] refuses to
// re-create the row for a lower token. Statements of your own that insert
// rows bypass that check; create rows that may have been deleted through
// Upsert.
//
// Refused, it is exactly one of a [*token.StaleError] with the row's
// mark, read under the row's lock, or [ErrNoRow]; either way nothing was
// written. Delete needs a key column fit for tombstones ([Table.Verify])
// and refuses others with a [*SchemaError], deleting nothing.
//
// MySQL cannot write two tables in one statement, so Delete is a
// transaction: it raises the tombstone, locks the row (SELECT … FOR
// UPDATE), checks its mark and deletes it, or rolls all of it back. On a
// *sql.DB or *sql.Conn the transaction is its own, run again when InnoDB
// picks it as a deadlock victim; on a *sql.Tx it is the caller's, from a
// savepoint that a refusal rolls back to, and a deadlock comes back as an
// error wrapping [ErrDeadlock] (InnoDB rolled the whole transaction
// back).
func (tb *Table) Delete(ctx context.Context, db DB, key any, t token.Token) error {
	resource, t, err := tb.admit(ctx, db, "delete", key, t)
	if err != nil {
		return err
	}
	tomb, err := tb.verifiedTombstone(ctx, db, key)
	if err != nil {
		return err
	}
	u := uint64(t)
	lock := `SELECT ` + tb.tok + ` FROM ` + tb.tbl + ` WHERE ` + tb.key + ` = ? FOR UPDATE`
	del := `DELETE FROM ` + tb.tbl + ` WHERE ` + tb.key + ` = ?`
	return inTx(ctx, db, "delete", func(tx DB) error {
		// The tombstone first: Upsert's insert path locks it before it
		// inserts the row, so both take the two locks in one order. A
		// refusal below rolls the raise back with the rest.
		if _, err := tx.ExecContext(ctx, tb.tokens.tombstoneSQL, tomb, u, u); err != nil {
			return tb.tokens.wrapErr("record the tombstone of "+resource+" in", err)
		}
		var cur uint64
		err := tx.QueryRowContext(ctx, lock, key).Scan(&cur)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("mysql: delete %s: %w", resource, ErrNoRow)
		}
		if err != nil {
			return tb.wrapErr("delete", resource, err)
		}
		if token.Token(cur) > t {
			return &token.StaleError{Resource: resource, Presented: t, Current: token.Token(cur)}
		}
		if _, err := tx.ExecContext(ctx, del, key); err != nil {
			return tb.wrapErr("delete", resource, err)
		}
		return nil
	})
}
