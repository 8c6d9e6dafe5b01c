package token

import (
	"context"
	"fmt"
	"sync"
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
func SequencerCheck(s Sequencer, o SequencerOptions) Check {
	if o.LockKey == nil {
		o.LockKey = func(r string) string { return r }
	}
	if o.CacheSize == 0 {
		o.CacheSize = 4096
	}
	return &seqCheck{s: s, o: o, cache: map[string]Token{}}
}

type seqCheck struct {
	s Sequencer
	o SequencerOptions

	mu    sync.Mutex
	cache map[string]Token // guarded by mu; lock key → last answer
}

func (c *seqCheck) Check(ctx context.Context, resource string, t Token) error {
	if c.s == nil {
		return fmt.Errorf("token: sequencer check for %q: nil Sequencer", resource)
	}
	key := c.o.LockKey(resource)
	if c.o.CacheSize > 0 {
		c.mu.Lock()
		cached := c.cache[key]
		c.mu.Unlock()
		if t <= cached {
			return nil
		}
	}
	cur, err := c.s.Current(ctx, key)
	if err != nil {
		return fmt.Errorf("token: sequencer check for %q (lock %q): %w", resource, key, err)
	}
	if c.o.CacheSize > 0 {
		c.mu.Lock()
		if prev, ok := c.cache[key]; !ok && len(c.cache) >= c.o.CacheSize {
			for k := range c.cache { // any one: the cache is an optimisation
				delete(c.cache, k)
				break
			}
			c.cache[key] = cur
		} else if cur > prev {
			c.cache[key] = cur
		}
		c.mu.Unlock()
	}
	if t > cur {
		return &ForgedError{Resource: resource, Presented: t, Bound: cur, By: "sequencer"}
	}
	return nil
}
