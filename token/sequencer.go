package token

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// A Sequencer is the lock service's side of Chubby's CheckSequencer: it
// tells a resource which token the lock currently stands at.
//
// Current returns the token granted to the current holder of the lock on
// key; when nobody holds it, the token of the last grant, or a bound that
// is at least that and below every later grant. It never returns a token
// below one already granted to a holder that may still act, and never one
// above the current holder's: so "t ≤ Current" admits every honest holder
// and refuses every token the lock has not reached. The lockers of
// fenceguard implement it per backend, from a plain client, with nothing
// to close.
//
// Successive results for one key never decrease. Implementations are safe
// for concurrent use.
type Sequencer interface {
	Current(ctx context.Context, key string) (Token, error)
}

// SequencerOptions configure [SequencerCheck]. Zero fields select defaults.
type SequencerOptions struct {
	// LockKey maps a resource key to the key of the lock that guards it.
	// Default: the same string, which suits resources keyed like their
	// locks ("sku:42" for both). A mapping that names the wrong lock
	// refuses honest holders or bounds nothing: the resource derives its key
	// from itself, and this function must too.
	LockKey func(resource string) string

	// CacheSize is how many lock keys' last answers are kept. A token at or
	// below the cached answer needs no query: answers never decrease. A
	// negative size disables the cache. Default 4096.
	CacheSize int

	// CacheTTL is how long a cached answer is used before the lock service
	// is asked again. Answers never decrease while the lock service keeps
	// its counters; an operator who recovers a lost or poisoned counter
	// (deletes it, or lets a healed one fall back to the clock) makes them
	// go down, and a cached answer from before would admit tokens up to
	// the old value until it ages out — or until [SequencerChecker.Forget]
	// is called. Default one minute; negative: answers never age.
	CacheTTL time.Duration

	// Now is the clock the cache ages by. Default time.Now.
	Now func() time.Time
}

// SequencerCheck returns the sequencer check: a token above the token of
// the current grant of the resource's lock — asked of s — is refused as
// forged.
//
// Threat model: a client of the resource that is not a holder can present
// any token. Anything above the current holder's token is refused, so the
// most a forger can do is act as the current holder until the next grant —
// it can never raise a mark above the current holder's token and lock out
// the holder or the queue behind it. (Not authentication: a forger who
// presents the current holder's exact token, or guesses it, is let in like
// the holder. Keep fenced routes to clients that take the lock.) The check
// fails closed: when s cannot answer, the claim is refused with s's error.
//
// Cost: one query to the lock service for the first token of each new
// grant a process sees, then none while tokens stay at or below the cached
// answer; a forger's every token above it costs one query. Put a
// [ClockBound] before it with [All] so made-up tokens far above the clock
// cost nothing.
func SequencerCheck(s Sequencer, o SequencerOptions) *SequencerChecker {
	if o.LockKey == nil {
		o.LockKey = func(r string) string { return r }
	}
	if o.CacheSize == 0 {
		o.CacheSize = 4096
	}
	if o.CacheTTL == 0 {
		o.CacheTTL = time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &SequencerChecker{s: s, o: o, cache: map[string]cached{}, flights: map[string]*flight{}}
}

// SequencerChecker is the [Check] [SequencerCheck] returns.
type SequencerChecker struct {
	s Sequencer
	o SequencerOptions

	mu      sync.Mutex
	cache   map[string]cached  // guarded by mu; lock key → last answer
	flights map[string]*flight // guarded by mu; lock key → lookups in flight
}

type cached struct {
	t  Token
	at time.Time
}

// A flight counts the lookups of one lock key in flight; Forget advances
// its generation, so that an answer asked for before a Forget is known
// for one.
type flight struct {
	n   int
	gen uint64
}

// maxLookups is how many times a check asks the lock service when every
// answer it gets was asked for before a Forget.
const maxLookups = 3

// Forget drops the cached answer for lockKey (every key when lockKey is
// empty), so that the next check asks the lock service. Call it after
// recovering the lock's counter — deleting it, or resetting a resource's
// mark below a cached answer — in every process that checks (or wait
// [SequencerOptions.CacheTTL]).
//
// A lookup in flight when Forget runs may carry an answer from before the
// recovery: its answer is neither cached nor used, and its check asks
// again.
func (c *SequencerChecker) Forget(lockKey string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if lockKey == "" {
		clear(c.cache)
		for _, f := range c.flights {
			f.gen++
		}
		return
	}
	delete(c.cache, lockKey)
	if f := c.flights[lockKey]; f != nil {
		f.gen++
	}
}

// Check implements [Check].
func (c *SequencerChecker) Check(ctx context.Context, resource string, t Token) error {
	if c.s == nil {
		return fmt.Errorf("token: sequencer check for %q: nil Sequencer", resource)
	}
	key := c.o.LockKey(resource)
	if c.o.CacheSize > 0 {
		c.mu.Lock()
		e, ok := c.cache[key]
		if ok && c.o.CacheTTL > 0 && c.o.Now().Sub(e.at) >= c.o.CacheTTL {
			delete(c.cache, key)
			ok = false
		}
		c.mu.Unlock()
		if ok && t <= e.t {
			return nil
		}
	}
	cur, err := c.lookup(ctx, key)
	if err != nil {
		return fmt.Errorf("token: sequencer check for %q (lock %q): %w", resource, key, err)
	}
	if t > cur {
		return &ForgedError{Resource: resource, Presented: t, Bound: cur, By: "sequencer"}
	}
	return nil
}

// lookup asks the lock service for key's current token and caches the
// answer, unless a Forget of key ran while it was asked: that answer may
// be from before an operator's recovery (higher than the recovered
// counter's), so it is dropped and the lock service asked again.
func (c *SequencerChecker) lookup(ctx context.Context, key string) (Token, error) {
	for range maxLookups {
		c.mu.Lock()
		f := c.flights[key]
		if f == nil {
			f = &flight{}
			c.flights[key] = f
		}
		f.n++
		gen := f.gen
		c.mu.Unlock()

		cur, err := c.s.Current(ctx, key)

		c.mu.Lock()
		forgotten := f.gen != gen
		if f.n--; f.n == 0 {
			delete(c.flights, key)
		}
		if err == nil && !forgotten && c.o.CacheSize > 0 {
			c.store(key, cur)
		}
		c.mu.Unlock()
		if err != nil || !forgotten {
			return cur, err
		}
	}
	return 0, fmt.Errorf("every answer of %d was asked for before a Forget of the lock", maxLookups)
}

// store caches cur as key's answer unless a higher one is cached; c.mu is
// held.
func (c *SequencerChecker) store(key string, cur Token) {
	prev, ok := c.cache[key]
	if ok {
		if cur > prev.t {
			c.cache[key] = cached{cur, c.o.Now()}
		}
		return
	}
	if len(c.cache) >= c.o.CacheSize {
		for k := range c.cache { // any one: the cache is an optimisation
			delete(c.cache, k)
			break
		}
	}
	c.cache[key] = cached{cur, c.o.Now()}
}
