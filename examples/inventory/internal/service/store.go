package service

import (
	"context"
	"errors"

	"github.com/fenceguard/fenceguard/token"
)

// ErrNotFound: the item does not exist. Nothing was written.
var ErrNotFound = errors.New("inventory: no such item")

// ErrSoldOut: the item's stock is 0, so [Store.Sell] sold nothing.
var ErrSoldOut = errors.New("inventory: sold out")

// MaxStock is the largest stock an item can hold (a PostgreSQL integer, a
// MySQL INT).
const MaxStock = 1<<31 - 1

// Item is one stock-keeping unit.
type Item struct {
	SKU   string `json:"sku"`
	Stock int    `json:"stock"`
}

// Store keeps the items. Implementations are safe for concurrent use.
//
// Get, SetStock and Sell take the lock holder's token, and every store
// enforces it itself: a non-zero token claims the item in the same atomic
// step as the access — one column-mode statement on the row
// ([PostgresStore], [MySQLStore]), one critical section under the store's mutex
// ([MemoryStore]) — and the access is refused with a *token.StaleError when
// a higher token has claimed the item. So the mark moves only on an access
// that happens: a missing item ([ErrNotFound]) is claimed by nobody and
// leaves no state behind. A zero token is a plain access, as an unfenced
// service makes.
type Store interface {
	Get(ctx context.Context, sku string, t token.Token) (Item, error)
	SetStock(ctx context.Context, sku string, stock int, t token.Token) (Item, error)
	// Sell sells one unit, fenced like SetStock: the stock goes down by
	// one, or, at 0, nothing changes and Sell returns [ErrSoldOut]. The
	// decrement is the store's own, so a holder need not read first.
	Sell(ctx context.Context, sku string, t token.Token) error

	// Put creates the item or overwrites its stock, unfenced: for
	// operators, not for lock holders.
	Put(ctx context.Context, sku string, stock int) (Item, error)
	// HighWater returns the item's high-water mark, 0 when none was claimed.
	HighWater(ctx context.Context, sku string) (token.Token, error)
	// ResetMark sets the item's fencing mark to to, and returns the mark
	// it replaced. The stores log it (enforce.LogReset).
	ResetMark(ctx context.Context, sku string, to token.Token) (token.Token, error)
	// Ping reports whether the store answers.
	Ping(ctx context.Context) error

	// Fencing says how the store enforces tokens.
	Fencing() Fencing
}

// Fencing describes how a store enforces tokens, for logs and the demo's
// banner. Every store claims in the access itself, so the middleware in
// front only checks the token (see [New]).
type Fencing struct {
	// Setup names the arrangement.
	Setup string
}

// resource is the resource key of an item: the lock key the holders lock,
// and the key httpmw.ChiParam("sku") derives from the route.
func resource(sku string) string { return "sku:" + sku }

// rowResource is the name a store's own check gives an item in a
// *token.StaleError: storage/postgres.Table's "<table>/<key>", which the
// memory store uses too.
func rowResource(sku string) string { return "items/" + sku }
