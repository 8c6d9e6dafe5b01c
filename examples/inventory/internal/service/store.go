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

// MaxStock is the largest stock an item can hold (a PostgreSQL integer).
const MaxStock = 1<<31 - 1

// Item is one stock-keeping unit.
type Item struct {
	SKU   string `json:"sku"`
	Stock int    `json:"stock"`
}

// Store keeps the items. Implementations are safe for concurrent use.
//
// Get and SetStock take the lock holder's token. A non-zero token is checked
// by stores that enforce tokens themselves ([PostgresStore]): the access
// first claims the item, in the same statement, and is refused with a
// *token.StaleError when a higher token has claimed it. A zero token is a
// plain access, as an unfenced service makes.
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
	// ResetMark sets every fencing mark of the item — the middleware's and,
	// in a store that checks tokens itself, the row's — to to, and returns
	// the highest mark it replaced. The stores log it (token.LogReset).
	ResetMark(ctx context.Context, sku string, to token.Token) (token.Token, error)
	// Ping reports whether the store answers.
	Ping(ctx context.Context) error

	// Fencing says how the middleware must fence this store's items.
	Fencing() Fencing
}

// Fencing is what a store asks of the fencing middleware in front of it.
type Fencing struct {
	// Fence is where the middleware claims resources ("sku:<sku>").
	Fence token.Fence
	// SerializePerKey: the store does not check tokens itself, so requests
	// for one item must run one at a time from claim to effect.
	SerializePerKey bool
	// Setup names the arrangement, for logs and the demo's banner.
	Setup string
}

// resource is the resource key of an item: the lock key the holders lock,
// and the key httpmw.ChiParam("sku") derives from the route.
func resource(sku string) string { return "sku:" + sku }
