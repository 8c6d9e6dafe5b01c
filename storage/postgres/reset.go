package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/enforce"
)

// errRace makes inTx run its function again: a row appeared between the
// locking read that did not find it and the insert.
var errRace = errors.New("postgres: the mark was created concurrently")

// inTx runs fn in a transaction on db (a savepoint when db is one) and
// commits. It runs fn again, in a fresh transaction, when fn returns
// errRace or the transaction fails with a serialization failure, as long
// as db is not the caller's transaction (whose snapshot a retry would not
// renew).
func inTx(ctx context.Context, db DB, what string, fn func(pgx.Tx) error) error {
	for retries := 0; ; retries++ {
		err := func() error {
			tx, err := db.Begin(ctx)
			if err != nil {
				return err
			}
			committed := false
			defer func() {
				if !committed {
					rollback(ctx, tx)
				}
			}()
			if err := fn(tx); err != nil {
				return err
			}
			committed = true
			return tx.Commit(ctx)
		}()
		_, nested := db.(pgx.Tx)
		again := errors.Is(err, errRace) || isSerializationFailure(err)
		if !again || nested || retries >= maxAttempts || ctx.Err() != nil {
			if errors.Is(err, errRace) {
				return fmt.Errorf("postgres: %s: the mark kept appearing and vanishing under %d attempts", what, retries+1)
			}
			return err
		}
	}
}

// Reset implements [token.Resetter] on the Tokens' table, on db: it sets
// resource's mark to to, whatever it was — lower or higher — and returns
// the mark it replaced (when the resource had none, the floor of pruned
// marks it was compared with, or 0: then it creates the mark, below the
// floor if to is). It is the way back for a mark poisoned by a forged token, without
// hand-written SQL; see [token.Resetter] for which token to reset to.
//
// It is refused, with nothing written, for an empty resource
// ([token.ErrNoResource]; there are no patterns, one call resets one
// resource), for to = 0 ([token.ErrMissing]), for a token above the bigint
// range (a [*token.RangeError]) and for a nil db ([ErrBadInput]). The
// token check does not apply: a reset is the operator's, not a holder's.
//
// The reset takes the mark's row lock, so it waits for a fenced
// transaction holding the resource ([Tokens.Tx]) and is ordered with every
// claim. Once it has committed, it writes the audit record (Warn, through
// [TokensOptions.Logger]: store "postgres <table>", the resource, both
// marks). On a [pgx.Tx] it runs on a savepoint and takes effect when the
// caller commits; the record is written when the savepoint is released.
func (k *Tokens) Reset(ctx context.Context, db DB, resource string, to token.Token) (prev token.Token, err error) {
	if err := enforce.CheckReset(resource, to); err != nil {
		return 0, fmt.Errorf("postgres: %w", err)
	}
	v, err := bigint(resource, to)
	if err != nil {
		return 0, err
	}
	if db == nil {
		return 0, fmt.Errorf("%w: nil DB", ErrBadInput)
	}
	err = inTx(ctx, db, "reset "+resource+" in "+k.name, func(tx pgx.Tx) error {
		p, found, err := k.lock(ctx, tx, resource)
		if err != nil {
			return err
		}
		prev = p
		if found {
			_, err = tx.Exec(ctx, k.setSQL, resource, v)
			return err
		}
		// No mark: the key was compared with the floor of pruned marks.
		if prev, _, err = k.highWater(ctx, tx, resource); err != nil {
			return err
		}
		var inserted bool
		err = tx.QueryRow(ctx, k.insertSQL, resource, v).Scan(&inserted)
		if errors.Is(err, pgx.ErrNoRows) {
			return errRace
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, resetDoneSQL)
		return err
	})
	if err != nil {
		return 0, k.wrapErr("reset "+resource+" in", err)
	}
	enforce.LogReset(ctx, k.logger, "postgres "+k.name, resource, prev, to)
	return prev, nil
}

// lock reads resource's mark and locks its row, if it has one.
func (k *Tokens) lock(ctx context.Context, q querier, resource string) (token.Token, bool, error) {
	var cur int64
	err := q.QueryRow(ctx, k.lockSQL, resource).Scan(&cur)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return token.Token(cur), true, nil
}

// Reset implements [token.Resetter]: [Tokens.Reset] on the Fence's table
// and DB.
func (f *Fence) Reset(ctx context.Context, resource string, to token.Token) (token.Token, error) {
	return f.tokens.Reset(ctx, f.db, resource, to)
}

// Reset sets the marks of the row with key — the row's token column, and
// the key's tombstone in the high-water table — to to, whatever they were,
// and returns the higher of the two it replaced: the way back for a row
// poisoned by a forged token (every honest holder refused as stale),
// without hand-written SQL. See [token.Resetter] for which token to reset
// to.
//
// Both marks, because both can be poisoned: the insert path of
// [Table.Upsert] claims the tombstone before it inserts, and a tombstone
// above the row's mark would come back at the row's next Delete and refuse
// its re-creation. The row may be gone: then only the tombstone is reset,
// and an honest holder may re-create the row. Reset touches exactly these
// two rows; it creates neither. With neither a row nor a tombstone it
// returns [ErrNoRow] and writes nothing. The tombstone is the one named by
// the key column's text form (see [Table.Delete]), whatever the key's type.
//
// It is refused, with nothing written, for a nil key or db
// ([ErrBadInput]), for to = 0 ([token.ErrMissing]) and for a token above
// the bigint range (a [*token.RangeError]). The token check does not
// apply: a reset is the operator's, not a holder's.
//
// Reset runs in one transaction that locks the tombstone and then the
// row — the order of Delete and Upsert — so it is ordered with every
// operation on the key. Once it has committed it writes an audit record
// (Warn, through [TableOptions.Logger]) for each mark it set: store
// "postgres <table>" with the row's resource name for the row, store
// "postgres <high-water table>" with the tombstone's name for the
// tombstone. On a [pgx.Tx] it runs on a savepoint and takes effect when
// the caller commits.
func (tb *Table) Reset(ctx context.Context, db DB, key any, to token.Token) (prev token.Token, err error) {
	resource, err := tb.args(db, "reset", key)
	if err != nil {
		return 0, err
	}
	if err := enforce.CheckReset(resource, to); err != nil {
		return 0, fmt.Errorf("postgres: %w", err)
	}
	v, err := bigint(resource, to)
	if err != nil {
		return 0, err
	}
	var (
		tombName          string
		rowPrev, tombPrev token.Token
		rowFound, tombFnd bool
	)
	err = inTx(ctx, db, "reset "+resource, func(tx pgx.Tx) error {
		// The tombstone's name in the key column's own text form; the
		// unread CTE gives $1 the key column's type.
		err := tx.QueryRow(ctx, `WITH fenceguard_cur AS (SELECT FROM `+tb.tbl+` WHERE `+tb.key+` = $1) SELECT $2 || $1::text`,
			key, tb.name+"/").Scan(&tombName)
		if err != nil {
			return err
		}
		if tombPrev, tombFnd, err = tb.tokens.lock(ctx, tx, tombName); err != nil {
			return err
		}
		var cur int64
		err = tx.QueryRow(ctx, tb.currentSQL+` FOR UPDATE`, key).Scan(&cur)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			rowFound = false
		case err != nil:
			return err
		default:
			rowPrev, rowFound = token.Token(cur), true
		}
		if !rowFound && !tombFnd {
			return tb.noRow("reset", key)
		}
		if rowFound {
			if _, err := tx.Exec(ctx, `UPDATE `+tb.tbl+` SET `+tb.tok+` = $2::bigint WHERE `+tb.key+` = $1`, key, v); err != nil {
				return err
			}
		}
		if tombFnd {
			if _, err := tx.Exec(ctx, tb.tokens.setSQL, tombName, v); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, ErrNoRow) {
		return 0, err
	}
	if err != nil {
		return 0, tb.wrapErr("reset", "", err)
	}
	if rowFound {
		enforce.LogReset(ctx, tb.logger, "postgres "+tb.name, resource, rowPrev, to)
	}
	if tombFnd {
		enforce.LogReset(ctx, tb.logger, "postgres "+tb.tokens.name, tombName, tombPrev, to)
	}
	return max(rowPrev, tombPrev), nil
}
