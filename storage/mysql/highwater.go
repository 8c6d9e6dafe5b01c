package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/fenceguard/fenceguard/token"
)

// HighWater returns the mark a holder must reach to act on the row with
// key: the row's token column when the row exists, the higher of that and
// the key's tombstone when it has one too, and the tombstone alone when
// the row is gone ([Table.Delete]). With neither a row nor a tombstone it
// returns [ErrNoRow]. A key column unfit for tombstones ([Table.Verify])
// has none, and only the row's mark is read.
//
// It is refused, with nothing sent, for a nil key or db ([ErrBadInput]).
// HighWater only reads: one SELECT, which takes no lock and waits for
// none, so the mark may have moved by the time it returns. It is what an
// operator looks at; fencing never decides on it.
func (tb *Table) HighWater(ctx context.Context, db DB, key any) (token.Token, error) {
	if db == nil {
		return 0, fmt.Errorf("%w: nil DB", ErrBadInput)
	}
	if key == nil {
		return 0, fmt.Errorf("%w: nil key", ErrBadInput)
	}
	resource := tb.name + "/" + keyName(key)
	tomb := "" // no resource key is empty: matches no tombstone
	if kind, err := tb.verify(ctx, db); err == nil {
		if tomb, err = tb.tombstone(kind, key); err != nil {
			return 0, err
		}
	} else if !errors.Is(err, ErrSchema) {
		return 0, err
	}
	var row, tombMark sql.Null[uint64]
	err := db.QueryRowContext(ctx, `SELECT (SELECT `+tb.tok+` FROM `+tb.tbl+` WHERE `+tb.key+` = ?),
 (SELECT token FROM `+tb.tokens.table+` WHERE resource = ?)`, key, tomb).Scan(&row, &tombMark)
	if err != nil {
		return 0, tb.wrapErr("read high-water of", resource, err)
	}
	if !row.Valid && !tombMark.Valid {
		return 0, fmt.Errorf("mysql: read high-water of %s: %w", resource, ErrNoRow)
	}
	return token.Token(max(row.V, tombMark.V)), nil
}
