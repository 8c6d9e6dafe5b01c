package service

import (
	"context"
	"sync"

	"github.com/fenceguard/fenceguard/token"
)

// MemoryStore keeps items in process memory: the fallback when no
// PostgreSQL is at hand. It does not check tokens itself; the middleware in
// front claims in its token.MemoryFence and serializes the requests of each
// item, which is as strong as a store check for a store that lives in one
// process. The zero value is not usable; call [NewMemoryStore].
type MemoryStore struct {
	fence token.MemoryFence

	mu    sync.Mutex
	stock map[string]int // guarded by mu
}

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore { return &MemoryStore{stock: map[string]int{}} }

// Fencing implements [Store]: a MemoryFence, one request per item at a time.
func (s *MemoryStore) Fencing() Fencing {
	return Fencing{Fence: &s.fence, SerializePerKey: true, Setup: "httpmw (in-memory Fence, requests serialized per item)"}
}

// Get implements [Store]. The token is not checked here (see [MemoryStore]).
func (s *MemoryStore) Get(_ context.Context, sku string, _ token.Token) (Item, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.stock[sku]
	if !ok {
		return Item{}, ErrNotFound
	}
	return Item{SKU: sku, Stock: n}, nil
}

// SetStock implements [Store]. The token is not checked here (see [MemoryStore]).
func (s *MemoryStore) SetStock(_ context.Context, sku string, stock int, _ token.Token) (Item, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.stock[sku]; !ok {
		return Item{}, ErrNotFound
	}
	s.stock[sku] = stock
	return Item{SKU: sku, Stock: stock}, nil
}

// Sell implements [Store].
func (s *MemoryStore) Sell(_ context.Context, sku string, _ token.Token) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.stock[sku]
	switch {
	case !ok:
		return ErrNotFound
	case n == 0:
		return ErrSoldOut
	}
	s.stock[sku] = n - 1
	return nil
}

// Put implements [Store].
func (s *MemoryStore) Put(_ context.Context, sku string, stock int) (Item, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stock[sku] = stock
	return Item{SKU: sku, Stock: stock}, nil
}

// HighWater implements [Store]: the mark in the middleware's fence.
func (s *MemoryStore) HighWater(_ context.Context, sku string) (token.Token, error) {
	s.mu.Lock()
	_, ok := s.stock[sku]
	s.mu.Unlock()
	if !ok {
		return 0, ErrNotFound
	}
	return s.fence.HighWater(resource(sku)), nil
}

// Ping implements [Store]; memory always answers.
func (s *MemoryStore) Ping(context.Context) error { return nil }

// ResetMark implements [Store]: the mark in the middleware's fence.
func (s *MemoryStore) ResetMark(ctx context.Context, sku string, to token.Token) (token.Token, error) {
	s.mu.Lock()
	_, ok := s.stock[sku]
	s.mu.Unlock()
	if !ok {
		return 0, ErrNotFound
	}
	return s.fence.Reset(ctx, resource(sku), to)
}
