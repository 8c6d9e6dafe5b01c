package postgres

import (
	"context"

	"github.com/fenceguard/fenceguard/token"
)

// HighWater returns the mark a holder must reach to act on the row with
// key: the row's token column when the row exists, or the higher of that
// and the key's tombstone in the high-water table when it has one too (a
// tombstone above the row's mark comes back at the row's next Delete, see
// [Table.Reset]); when the row is gone, its tombstone ([Table.Delete]).
// With neither a row nor a tombstone it returns [ErrNoRow]: the key was
// never inserted through [Table.Upsert], or its tombstone was pruned, and
// its creation is compared with the floor of pruned marks
// ([Tokens.Floor]). The tombstone is the one named by the key column's
// text form (see [Table.Delete]), whatever the key's type.
//
// It is refused, with nothing sent, for a nil key or db ([ErrBadInput]).
// HighWater only reads: one SELECT, which takes no lock and waits for
// none, so the mark may have moved by the time it returns. It is what an
// operator looks at before [Table.Reset]; fencing never decides on it.
func (tb *Table) HighWater(ctx context.Context, db DB, key any) (token.Token, error) {
	if _, err := tb.args(db, "read high-water of", key); err != nil {
		return 0, err
	}
	var row, tomb *int64
	if err := db.QueryRow(ctx, tb.highWaterSQL, key, tb.name+"/").Scan(&row, &tomb); err != nil {
		return 0, tb.wrapErr("read high-water of", tb.highWaterSQL, err)
	}
	if row == nil && tomb == nil {
		return 0, tb.noRow("read high-water of", key)
	}
	return max(token.Token(deref(row)), token.Token(deref(tomb))), nil
}
