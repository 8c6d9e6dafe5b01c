package service

import (
	"context"
	"log/slog"
	"sync"

	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/enforce"
)

// MemoryStore keeps items in process memory: the fallback when no
// PostgreSQL is at hand. It enforces tokens itself, as the PostgreSQL store
// does in its statements: each item carries its own high-water mark, and a
// fenced access checks and advances it under the store's mutex, in the same
// critical section as the read or the write — so claim and effect are one
// step, and nothing else (a newer holder's claim, an unfenced admin write)
// runs in between. A name that is no item is claimed by nobody: it leaves
// no state. Strong within this one process, which is the only one that
// holds the items anyway. The zero value is not usable; call
// [NewMemoryStore].
type MemoryStore struct {
	// Check runs before every fenced access, like storage/postgres.Table's
	// TableOptions.Check: a token it refuses moves no mark. Default
	// token.DefaultCheck (the clock bound). Set it before first use.
	Check token.Check
	// Logger receives the audit record of every ResetMark. Default
	// slog.Default(). Set it before first use.
	Logger *slog.Logger

	mu    sync.Mutex
	items map[string]*memItem // guarded by mu
}

type memItem struct {
	stock int
	mark  token.Token // the highest token that accessed the item; 0: none
}

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore { return &MemoryStore{items: map[string]*memItem{}} }

// Fencing implements [Store].
func (s *MemoryStore) Fencing() Fencing {
	return Fencing{Setup: "in-memory store: each item's mark checked and advanced under the store's mutex with the access"}
}

// access runs f on the item under the mutex, after claiming it for t (a
// zero t claims nothing). A missing item is ErrNotFound and a stale token a
// *token.StaleError, and then f does not run and nothing changes.
func (s *MemoryStore) access(ctx context.Context, sku string, t token.Token, f func(*memItem) error) error {
	if !t.IsZero() {
		c := s.Check
		if c == nil {
			c = token.DefaultCheck()
		}
		if err := c.Check(ctx, rowResource(sku), t); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	it, ok := s.items[sku]
	if !ok {
		return ErrNotFound
	}
	if !t.IsZero() {
		if t < it.mark {
			return &token.StaleError{Resource: rowResource(sku), Presented: t, Current: it.mark}
		}
		it.mark = t
	}
	return f(it)
}

// Get implements [Store].
func (s *MemoryStore) Get(ctx context.Context, sku string, t token.Token) (Item, error) {
	var n int
	err := s.access(ctx, sku, t, func(it *memItem) error { n = it.stock; return nil })
	if err != nil {
		return Item{}, err
	}
	return Item{SKU: sku, Stock: n}, nil
}

// SetStock implements [Store].
func (s *MemoryStore) SetStock(ctx context.Context, sku string, stock int, t token.Token) (Item, error) {
	err := s.access(ctx, sku, t, func(it *memItem) error { it.stock = stock; return nil })
	if err != nil {
		return Item{}, err
	}
	return Item{SKU: sku, Stock: stock}, nil
}

// Sell implements [Store]. Sold out, the item is claimed all the same, as
// in the PostgreSQL store: the holder saw the stock.
func (s *MemoryStore) Sell(ctx context.Context, sku string, t token.Token) error {
	return s.access(ctx, sku, t, func(it *memItem) error {
		if it.stock == 0 {
			return ErrSoldOut
		}
		it.stock--
		return nil
	})
}

// Put implements [Store]. It leaves the item's mark alone: a mark never
// goes down, or a stale holder could use the reset.
func (s *MemoryStore) Put(_ context.Context, sku string, stock int) (Item, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if it, ok := s.items[sku]; ok {
		it.stock = stock
	} else {
		s.items[sku] = &memItem{stock: stock}
	}
	return Item{SKU: sku, Stock: stock}, nil
}

// HighWater implements [Store]: the item's mark.
func (s *MemoryStore) HighWater(_ context.Context, sku string) (token.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, ok := s.items[sku]
	if !ok {
		return 0, ErrNotFound
	}
	return it.mark, nil
}

// Marks returns how many marks the store keeps: one per item that exists,
// never more — a name that is no item leaves none.
func (s *MemoryStore) Marks() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, it := range s.items {
		if it.mark != 0 {
			n++
		}
	}
	return n
}

// Ping implements [Store]; memory always answers.
func (s *MemoryStore) Ping(context.Context) error { return nil }

// ResetMark implements [Store]: the item's mark, logged (enforce.LogReset).
func (s *MemoryStore) ResetMark(ctx context.Context, sku string, to token.Token) (token.Token, error) {
	if err := enforce.CheckReset(rowResource(sku), to); err != nil {
		return 0, err
	}
	s.mu.Lock()
	it, ok := s.items[sku]
	var prev token.Token
	if ok {
		prev, it.mark = it.mark, to
	}
	s.mu.Unlock()
	if !ok {
		return 0, ErrNotFound
	}
	enforce.LogReset(ctx, s.Logger, "inventory memory store", rowResource(sku), prev, to)
	return prev, nil
}
