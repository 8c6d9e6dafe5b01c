package guard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/token"
)

// Leases is a critical section over several keys: one [Lease] per key, each
// with its own token and keep-alive, held together. Get one from
// [Guard.AcquireAll] or [Guard.TryAcquireAll]; [Guard.DoAll] manages one
// for a function.
type Leases struct {
	keys   []string // canonical order
	leases []*Lease // leases[i] holds keys[i]
	ctx    context.Context
	cancel context.CancelCauseFunc
	stops  []func() bool

	once   sync.Once
	relErr error
}

// AcquireAll acquires the locks on keys and returns them held together.
//
// The keys are taken one after another in one canonical order — sorted
// bytewise, each key once whatever the order and repetitions of keys — so
// that two callers asking for overlapping sets, in any order, cannot
// deadlock: whoever holds a key only ever waits for keys that sort after
// it. Each key is acquired as by [Guard.Acquire] (transient errors
// retried, a key held by ctx's own critical section taken as a nested
// hold). When one fails or ctx ends, the keys already taken are released
// before AcquireAll returns (while ctx lives; in the background after),
// and the error names the key; nothing is left held or waiting.
//
// Keys must be non-empty and there must be at least one: otherwise
// AcquireAll fails with an error wrapping [locks.ErrInvalidArgument]
// before it takes anything.
//
// Nested holds order differently: keys held by an enclosing critical
// section were taken before, whatever their order. A section nested in
// one over key b that asks for {a, b} takes a while holding b, and can
// wait for a holder of a that waits for b. Take every key a section needs
// in one call.
func (g *Guard) AcquireAll(ctx context.Context, keys ...string) (*Leases, error) {
	return g.acquireAll(ctx, keys, false, g.Acquire)
}

// TryAcquireAll is AcquireAll making one attempt per key: when a lock is
// held it releases the keys it took and returns an error wrapping
// [locks.ErrNotObtained] that names the key.
func (g *Guard) TryAcquireAll(ctx context.Context, keys ...string) (*Leases, error) {
	return g.acquireAll(ctx, keys, true, g.TryAcquire)
}

// canonical returns keys sorted, each once, or an error wrapping
// locks.ErrInvalidArgument.
func canonical(keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("guard: %w: no keys", locks.ErrInvalidArgument)
	}
	if slices.Contains(keys, "") {
		return nil, fmt.Errorf("guard: %w: empty key", locks.ErrInvalidArgument)
	}
	return slices.Compact(slices.Sorted(slices.Values(keys))), nil
}

func (g *Guard) acquireAll(ctx context.Context, keys []string, tryOnly bool, acquire func(context.Context, string) (*Lease, error)) (*Leases, error) {
	keys, err := canonical(keys)
	if err != nil {
		return nil, err
	}
	if leases, done, err := g.tryAllAtOnce(ctx, keys); done {
		if err != nil {
			return nil, err
		}
		return g.join(ctx, keys, leases), nil
	} else if tryOnly && errors.Is(err, locks.ErrNotObtained) {
		return nil, err
	}
	taken := make([]*Lease, 0, len(keys))
	for _, k := range keys {
		l, err := acquire(ctx, k)
		if err != nil {
			g.releaseAll(ctx, taken)
			return nil, err // names k
		}
		taken = append(taken, l)
	}
	return g.join(ctx, keys, taken), nil
}

// tryAllAtOnce tries every key in one round trip when the locker can
// ([locks.MultiTryAcquirer]) and ctx holds none of them. done reports
// that the leases, or the error, are the answer; otherwise err says why
// not (ErrNotObtained: a key was held) and the keys are to be taken one
// by one.
func (g *Guard) tryAllAtOnce(ctx context.Context, keys []string) (leases []*Lease, done bool, err error) {
	m, ok := g.locker.(locks.MultiTryAcquirer)
	if !ok {
		return nil, false, nil
	}
	for _, k := range keys {
		if heldIn(ctx, g, k) != nil {
			return nil, false, nil
		}
	}
	start := g.o.Clock.Now()
	ls, err := m.TryAcquireAll(ctx, keys, g.o.TTL)
	switch {
	case err == nil && len(ls) != len(keys):
		for _, l := range ls {
			g.releaseLate(ctx, l)
		}
		return nil, true, fmt.Errorf("guard: acquire %q: the locker granted %d leases for %d keys", keys, len(ls), len(keys))
	case err == nil:
	case ctx.Err() != nil:
		return nil, true, fmt.Errorf("guard: acquire %q: %w", keys, err)
	default:
		return nil, false, fmt.Errorf("guard: acquire %q: %w", keys, err)
	}
	for _, l := range ls {
		h := g.hold(ctx, l, start)
		if h == nil {
			// Too late to be of use (the call outlasted the TTL): give
			// everything back and take the keys one by one.
			_ = g.releaseAll(ctx, leases)
			for _, l := range ls[len(leases):] {
				g.releaseLate(ctx, l)
			}
			return nil, false, fmt.Errorf("guard: acquire %q: granted after its local deadline had passed: %w", keys, ErrDeadline)
		}
		leases = append(leases, &Lease{h: h})
	}
	return leases, true, nil
}

// join holds leases, which hold keys, together: its context has ctx's
// values and those of withHolds, and is cancelled when any lease is lost.
func (g *Guard) join(ctx context.Context, keys []string, leases []*Lease) *Leases {
	s := &Leases{keys: keys, leases: leases}
	s.ctx, s.cancel = context.WithCancelCause(g.withHolds(context.WithoutCancel(ctx), keys, leases))
	for _, l := range leases {
		lctx := l.Context()
		s.stops = append(s.stops, context.AfterFunc(lctx, func() { s.cancel(context.Cause(lctx)) }))
	}
	return s
}

// withHolds returns ctx carrying every key's token and hold, and the
// earliest end of the leases for the resource side.
func (g *Guard) withHolds(ctx context.Context, keys []string, leases []*Lease) context.Context {
	for i, l := range leases {
		ctx = context.WithValue(token.NewContext(ctx, keys[i], l.Token()), holdKey{g, keys[i]}, l.h)
	}
	return token.WithExpiry(ctx, within(ctx, func() time.Time {
		var first time.Time
		for _, l := range leases {
			if e := l.h.expiry(); first.IsZero() || e.Before(first) {
				first = e
			}
		}
		return first
	}))
}

// stop detaches the set from its leases and ends its context.
func (s *Leases) stop() {
	s.cancel(ErrReleased)
	for _, stop := range s.stops {
		stop()
	}
}

// releaseAll releases leases, all at once, as Do releases one: while ctx
// lives (and a short grace after), then in the background. It returns the
// errors joined.
func (g *Guard) releaseAll(ctx context.Context, leases []*Lease) error {
	errs := make([]error, len(leases))
	var wg sync.WaitGroup
	for i, l := range leases {
		wg.Go(func() { errs[i] = g.release(ctx, l) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Keys returns the keys held, in the canonical order they were taken.
func (s *Leases) Keys() []string { return slices.Clone(s.keys) }

// Token returns key's fencing token, or 0 when key is not one of the set's.
// A token is meaningful only with its own key: send each resource the
// token of the key that guards it.
func (s *Leases) Token(key string) token.Token {
	if l := s.Lease(key); l != nil {
		return l.Token()
	}
	return 0
}

// Tokens returns every key's token, a fresh map on each call.
func (s *Leases) Tokens() map[string]token.Token {
	m := make(map[string]token.Token, len(s.keys))
	for i, k := range s.keys {
		m[k] = s.leases[i].Token()
	}
	return m
}

// Lease returns key's lease as a nested hold (its Release does nothing but
// report a loss: release the set), or nil when key is not one of the set's.
func (s *Leases) Lease(key string) *Lease {
	i, ok := slices.BinarySearch(s.keys, key)
	if !ok {
		return nil
	}
	return &Lease{h: s.leases[i].h, nested: true}
}

// Context is cancelled when any of the leases is lost, with that lease's
// cause (an error wrapping [ErrLost] that names the key and its token), or
// when the set is released, with [ErrReleased]. It carries every key's
// token ([token.Lookup]; resource-side enforcers find each key's own), the
// earliest end of the leases ([token.Expiry]) and the holds, for
// re-entrant acquires of any of the keys.
func (s *Leases) Context() context.Context { return s.ctx }

// Deadline is the earliest of the leases' local deadlines.
func (s *Leases) Deadline() time.Time {
	var first time.Time
	for _, l := range s.leases {
		if d := l.Deadline(); first.IsZero() || d.Before(first) {
			first = d
		}
	}
	return first
}

// Release releases every lease, all at once, and waits for them while ctx
// lasts. It returns their errors joined: errors.Is(err, ErrLost) holds when
// any of them had been lost. Release is idempotent: later calls return the
// first call's result.
func (s *Leases) Release(ctx context.Context) error {
	s.once.Do(func() {
		s.stop()
		errs := make([]error, len(s.leases))
		var wg sync.WaitGroup
		for i, l := range s.leases {
			wg.Go(func() { errs[i] = l.Release(ctx) })
		}
		wg.Wait()
		s.relErr = errors.Join(errs...)
	})
	return s.relErr
}

// DoAll acquires every key ([Guard.AcquireAll]), runs fn, and releases them
// all, also when fn panics. fn gets each key's token, and a context that
// carries them all ([token.Lookup]), the earliest lease end
// ([token.Expiry]) and the holds; it is cancelled with a cause wrapping
// [ErrLost] and naming the key when any lease is lost. The error is as
// Do's: fn's joined with the releases', errors.Is(err, ErrLost) when a
// lease was lost.
//
//	err := g.DoAll(ctx, []string{"acct:1", "acct:2"}, func(ctx context.Context, t map[string]token.Token) error {
//		// claim acct:1 with t["acct:1"] and acct:2 with t["acct:2"] in one
//		// transaction, then debit one and credit the other in it
//	})
func (g *Guard) DoAll(ctx context.Context, keys []string, fn func(ctx context.Context, tokens map[string]token.Token) error) error {
	s, err := g.AcquireAll(ctx, keys...)
	if err != nil {
		return err
	}
	return g.run(ctx, s.ctx,
		func(c context.Context) context.Context { return g.withHolds(c, s.keys, s.leases) },
		func() error {
			var err error
			s.once.Do(func() {
				s.stop()
				err = g.releaseAll(ctx, s.leases)
			})
			return err
		},
		func(fctx context.Context) error { return fn(fctx, s.Tokens()) })
}
