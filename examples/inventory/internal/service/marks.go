package service

import (
	"sync"
	"time"

	"github.com/fenceguard/fenceguard/token"
)

// DefaultMarkCacheTTL is how long a mark the store reported refuses lower
// tokens in this process without asking the store again.
const DefaultMarkCacheTTL = time.Second

// maxCachedMarks bounds the cache: marks are learned only from answers
// about items that exist, and past this many a new one is not kept.
const maxCachedMarks = 1 << 16

// markCache remembers, per item, a mark the store reported — the token it
// accepted, or the current mark in a stale refusal — so that a token below
// it is refused in the process, without a statement: a holder that lost
// its lock usually keeps trying, and each try would cost the store a
// refused claim and a second statement to say why.
//
// It only ever refuses what the store would refuse. A mark the store
// reported is a lower bound of the item's mark from then on, because marks
// only go up — except by an operator's reset. A reset through this process
// drops the item's entry; one through another process (or straight in the
// database) is seen here within the TTL, after which the store is asked
// again, and every answer of the store replaces the entry — except an
// answer to a request that was in flight when a reset went through this
// process: it may be from before the reset, and is not kept. So after a
// reset that lowers a mark, another instance may go on refusing tokens
// between the new and the old mark for up to the TTL; nothing it accepts
// is ever decided here — every token it lets through is checked and
// claimed by the store, in the statement that accesses the item.
type markCache struct {
	ttl time.Duration
	now func() time.Time

	mu     sync.Mutex
	m      map[string]cachedMark
	resets uint64 // resets through this process, so far
}

type cachedMark struct {
	mark token.Token
	at   time.Time
}

// newMarkCache returns a cache whose entries live ttl, or nil (no cache)
// when ttl < 0.
func newMarkCache(ttl time.Duration, now func() time.Time) *markCache {
	if ttl < 0 {
		return nil
	}
	if ttl == 0 {
		ttl = DefaultMarkCacheTTL
	}
	if now == nil {
		now = time.Now
	}
	return &markCache{ttl: ttl, now: now, m: map[string]cachedMark{}}
}

// stale returns the refusal of t for sku if a live entry's mark is above
// it, else nil.
func (c *markCache) stale(sku string, t token.Token) *token.StaleError {
	if c == nil || t.IsZero() {
		return nil
	}
	c.mu.Lock()
	e, ok := c.m[sku]
	c.mu.Unlock()
	if !ok || t >= e.mark || c.now().Sub(e.at) >= c.ttl {
		return nil
	}
	return &token.StaleError{Resource: resource(sku), Presented: t, Current: e.mark}
}

// epoch is taken before a request asks the store, and given to learn
// with the store's answer.
func (c *markCache) epoch() uint64 {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.resets
}

// learn records the store's latest word on sku's mark, asked for at
// epoch. It replaces what was there, lower or not: a lower answer than the
// entry's means the mark was reset (or an older answer arrived late) — a
// lower bound either way. An answer asked for before a reset through this
// process (forget) is dropped: it may name the mark the reset replaced.
func (c *markCache) learn(sku string, mark token.Token, epoch uint64) {
	if c == nil || mark.IsZero() {
		return
	}
	now := c.now()
	c.mu.Lock()
	if epoch != c.resets {
		// asked for before a reset: the entry stays as the reset left it
	} else if _, ok := c.m[sku]; ok || len(c.m) < maxCachedMarks {
		c.m[sku] = cachedMark{mark: mark, at: now}
	}
	c.mu.Unlock()
}

// forget drops sku's entry (its mark was reset through this process), and
// every answer still to come to a request asked before it.
func (c *markCache) forget(sku string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	delete(c.m, sku)
	c.resets++
	c.mu.Unlock()
}
