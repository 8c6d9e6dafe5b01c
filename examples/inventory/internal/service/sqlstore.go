package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/fenceguard/fenceguard/token"
)

// rows runs the statements of one database on the items table (sku, stock,
// fence_token): plain ones, and fenced ones in column mode, each of which
// checks and advances the row's mark in the statement that makes the
// access. [sqlStore] gives their outcomes the service's meaning, the same
// for every database.
type rows interface {
	// selectStock reads the stock; no row is an error noRow reports.
	selectStock(ctx context.Context, sku string) (int, error)
	// updateStock sets the stock and returns the rows it changed: 0 for
	// no row, and, on MySQL, for a stock set to the value it had.
	updateStock(ctx context.Context, sku string, stock int) (int64, error)
	// decrement takes one off a stock above 0 and returns the rows it
	// changed: 0 for no row and for a stock at 0.
	decrement(ctx context.Context, sku string) (int64, error)
	upsert(ctx context.Context, sku string, stock int) error
	// mark reads the row's mark; no row is an error noRow reports.
	mark(ctx context.Context, sku string) (token.Token, error)
	ping(ctx context.Context) error

	// The fenced accesses. No row is token.ErrNotFound; a stock at 0 is
	// token.ErrCondition from sell, which claims the row all the same.
	readStock(ctx context.Context, sku string, t token.Token) (int, error)
	setStock(ctx context.Context, sku string, stock int, t token.Token) error
	sell(ctx context.Context, sku string, t token.Token) error
	// resetMark sets the row's mark to to, logs it and returns the mark it
	// replaced.
	resetMark(ctx context.Context, sku string, to token.Token) (token.Token, error)

	// noRow reports whether err is the driver's "no rows" from a plain
	// read.
	noRow(err error) bool
}

// sqlStore is a [Store] on a SQL database, whose statements r runs: a zero
// token makes a plain statement, any other the fenced one.
type sqlStore struct {
	r     rows
	setup string // Fencing().Setup
}

// Fencing implements [Store].
func (s *sqlStore) Fencing() Fencing { return Fencing{Setup: s.setup} }

// Get implements [Store].
func (s *sqlStore) Get(ctx context.Context, sku string, t token.Token) (Item, error) {
	it := Item{SKU: sku}
	var err error
	if t.IsZero() {
		it.Stock, err = s.r.selectStock(ctx, sku)
	} else {
		it.Stock, err = s.r.readStock(ctx, sku, t)
	}
	return it, s.err(err)
}

// SetStock implements [Store].
func (s *sqlStore) SetStock(ctx context.Context, sku string, stock int, t token.Token) (Item, error) {
	var err error
	if t.IsZero() {
		var n int64
		if n, err = s.r.updateStock(ctx, sku, stock); err == nil && n == 0 {
			_, err = s.r.selectStock(ctx, sku) // no such item, or the stock it had
		}
	} else {
		err = s.r.setStock(ctx, sku, stock, t)
	}
	return Item{SKU: sku, Stock: stock}, s.err(err)
}

// Sell implements [Store]. Fenced, it is one statement on the row —
// UPDATE items SET stock = stock - 1 WHERE sku = … AND stock > 0, with the
// token check and the claim in it (the enforcer's Add and Where) — so a
// sale needs no read first, and a stale holder, a missing item and a
// sold-out one are three different answers. Sold out, the row is claimed
// all the same: the holder saw the stock.
func (s *sqlStore) Sell(ctx context.Context, sku string, t token.Token) error {
	if t.IsZero() {
		n, err := s.r.decrement(ctx, sku)
		if err == nil && n == 0 { // sold out, or no such item
			if _, err = s.r.selectStock(ctx, sku); err == nil {
				err = ErrSoldOut
			}
		}
		return s.err(err)
	}
	err := s.r.sell(ctx, sku, t)
	if errors.Is(err, token.ErrCondition) {
		return fmt.Errorf("%w (%w)", ErrSoldOut, err)
	}
	return s.err(err)
}

// Put implements [Store]. It leaves the item's mark alone: a mark never goes
// down, or a stale holder could use the reset.
func (s *sqlStore) Put(ctx context.Context, sku string, stock int) (Item, error) {
	return Item{SKU: sku, Stock: stock}, s.err(s.r.upsert(ctx, sku, stock))
}

// HighWater implements [Store]: the row's mark.
func (s *sqlStore) HighWater(ctx context.Context, sku string) (token.Token, error) {
	mark, err := s.r.mark(ctx, sku)
	return mark, s.err(err)
}

// ResetMark implements [Store]: the row's own mark, reset and logged.
func (s *sqlStore) ResetMark(ctx context.Context, sku string, to token.Token) (token.Token, error) {
	prev, err := s.r.resetMark(ctx, sku, to)
	return prev, s.err(err)
}

// Ping implements [Store].
func (s *sqlStore) Ping(ctx context.Context) error { return s.r.ping(ctx) }

// err maps "no such row", plain or fenced, to [ErrNotFound].
func (s *sqlStore) err(err error) error {
	if errors.Is(err, token.ErrNotFound) || (err != nil && s.r.noRow(err)) {
		return ErrNotFound
	}
	return err
}
