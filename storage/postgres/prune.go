package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fenceguard/fenceguard/token"
)

// pruneBatch is how many marks one statement of Prune deletes at most, so
// that no transaction of Prune holds many row locks or runs long.
const pruneBatch = 5000

// errNotMigrated is the cause of the [*SchemaError] [Tokens.Prune] returns
// on a high-water table that [Tokens.Migrate] of this version has not run
// on: without the floor's trigger and row, deleting marks would not be
// safe.
var errNotMigrated = errors.New("the high-water table lacks the floor trigger")

// Prune deletes, from the default high-water table, the marks not claimed
// for olderThan. See [Tokens.Prune].
func Prune(ctx context.Context, db DB, olderThan time.Duration) (int64, error) {
	return defaultTokens.Prune(ctx, db, olderThan)
}

// Prune deletes the marks of k's table that no claim has advanced or
// confirmed for olderThan (by updated_at, the server's clock) — marks of
// keys that no longer exist or are no longer used, the tombstones of
// [Table.Delete] included — and returns how many it deleted. Call it
// periodically (a job, or a ticker in one instance: it is safe from
// several at once) to keep the table's size bounded by the keys used
// within olderThan rather than by every key ever named.
//
// Pruning never lets an older token in: Prune raises the table's floor
// (the row of the empty resource "") to the highest mark it deleted, in
// the same statement, and a key without a row is compared with the floor.
// [Tokens.HighWater] of a pruned key is the floor. Marks locked by a claim
// in progress are skipped, not waited for. Prune refuses, with a
// [*SchemaError] and nothing deleted, on a table [Tokens.Migrate] has not
// upgraded.
//
// Choose olderThan longer than any holder keeps one token (its whole
// lease, renewals included) and than the forged-token check's allowance
// above the clock ([token.DefaultSkew] for the default); an hour is a
// safe default for leases of seconds. Keep tokens of different lock
// services in different tables (TokensOptions.Name), and with etcd's or
// ZooKeeper's tokens use the sequencer check: a forged mark that gets
// pruned becomes the floor. Why these rules suffice is in docs/design.md,
// "Bounded state".
func (k *Tokens) Prune(ctx context.Context, db DB, olderThan time.Duration) (int64, error) {
	if db == nil {
		return 0, fmt.Errorf("%w: nil DB", ErrBadInput)
	}
	if olderThan <= 0 {
		return 0, fmt.Errorf("%w: Prune olderThan %v is not positive", ErrBadInput, olderThan)
	}
	var migrated bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_trigger WHERE tgrelid = $1::text::regclass AND tgname = $2 AND tgenabled <> 'D')
 AND EXISTS (`+k.floorSQL+`)`, k.table, floorTrigger).Scan(&migrated)
	if err != nil {
		return 0, k.wrapErr("prune", err)
	}
	if !migrated {
		return 0, &SchemaError{Object: k.name, Err: errNotMigrated, Fix: k.migrateFix()}
	}
	var total int64
	for retries := 0; ; {
		var n int64
		var floor *int64
		err := db.QueryRow(ctx, k.pruneSQL, olderThan.Microseconds(), pruneBatch).Scan(&n, &floor)
		if retriable(db, err) && retries < maxSerializationRetries && ctx.Err() == nil {
			retries++
			continue
		}
		if err != nil {
			return total, k.wrapErr("prune", err)
		}
		total += n
		if n < pruneBatch {
			return total, nil
		}
	}
}

// Floor returns the floor of pruned marks of k's table: the highest mark
// [Tokens.Prune] deleted, which every key without a mark is compared
// with; 0 if Prune deleted none (the floor's row then holds 1, which
// refuses nothing).
func (k *Tokens) Floor(ctx context.Context, db DB) (token.Token, error) {
	if db == nil {
		return 0, fmt.Errorf("%w: nil DB", ErrBadInput)
	}
	var f int64
	err := db.QueryRow(ctx, k.floorSQL).Scan(&f)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, k.wrapErr("read the floor of", err)
	}
	return floorValue(f), nil
}

// floorValue is the floor the row of resource "" holds: Migrate creates it
// with 1, which refuses nothing (tokens start at 1) and reads as 0.
func floorValue(v int64) token.Token {
	if v <= 1 {
		return 0
	}
	return token.Token(v)
}
