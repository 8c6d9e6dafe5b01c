package mysql

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fenceguard/fenceguard/token"
)

// Returning makes [Table.Update] return column's value as the Update left
// it, scanned into dest as database/sql's Scan does: a debit reads the new
// balance in the same transaction as the write,
//
//	var balance int64
//	err := accounts.Update(ctx, db, id, t, mysql.Add("balance", -amount),
//		mysql.Where("balance >= ?", amount), mysql.Returning("balance", &balance))
//
// MySQL has no UPDATE … RETURNING (MariaDB has RETURNING only for INSERT
// and DELETE), so an Update with Returning is a transaction: the fenced
// UPDATE, which keeps the row's exclusive lock until the transaction
// ends, then a SELECT of the row, which therefore sees exactly what the
// UPDATE left, the token column holding t. On a *sql.DB or *sql.Conn the
// transaction is its own (four round trips instead of one; retried when
// InnoDB picks it as a deadlock victim); on a *sql.Tx it is the caller's,
// from a savepoint. Several Returning clauses scan in their order.
//
// dest is written only when the Update is accepted; a refusal — a
// [*token.StaleError], [ErrNoRow], a [*ConditionError] (the row is still
// claimed) — leaves it untouched. If dest cannot hold its column, the
// Update is rolled back and the scan error returned; after any other
// error, dest may hold the row's values or not. [Table.Upsert] does not
// take it.
func Returning(column string, dest any) Clause {
	return Clause{kind: clauseReturning, column: column, value: dest}
}

// updateReturning is Update with Returning clauses: the fenced statement,
// then the read of the row, in one transaction.
func (tb *Table) updateReturning(ctx context.Context, db DB, key any, t token.Token, set []Clause) error {
	resource, t, err := tb.admit(ctx, db, "update", key, t)
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
	var cols []string
	var dest []any
	for _, c := range set {
		if c.kind != clauseReturning {
			continue
		}
		col, err := quoteName([]string{c.column})
		if err != nil {
			return fmt.Errorf("%w (Returning column)", err)
		}
		if c.value == nil {
			return fmt.Errorf("%w: Returning %s into nil", ErrBadInput, c.column)
		}
		cols, dest = append(cols, col), append(dest, c.value)
	}
	q := `SELECT ` + strings.Join(cols, ", ") + ` FROM ` + tb.tbl + ` WHERE ` + tb.key + ` = ?`
	var condErr *ConditionError
	err = inTx(ctx, db, "update", func(tx DB) error {
		condErr = nil
		err := tb.runUpdate(ctx, tx, "update", resource, key, t, st)
		if errors.As(err, &condErr) {
			return nil // commit the claim; nothing to read back
		}
		if err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, q, key).Scan(dest...); err != nil {
			return tb.wrapErr("update", resource, err)
		}
		return nil
	})
	if err == nil && condErr != nil {
		return condErr
	}
	return err
}
