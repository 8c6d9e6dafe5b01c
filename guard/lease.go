package guard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/token"
)

// Lease is a held lock with its keep-alive running. Nested holds (see
// "Re-entrancy") share the outermost one's lease.
type Lease struct {
	h      *hold
	nested bool

	once   sync.Once
	relErr error
}

// Key is the lock's key.
func (l *Lease) Key() string { return l.h.lease.Key() }

// Token is the grant's fencing token. Send it with every access to the
// guarded resource.
func (l *Lease) Token() token.Token { return l.h.lease.Token() }

// Context is cancelled when the lease is lost, with a [context.Cause]
// wrapping [ErrLost] and the reason (an error wrapping [locks.ErrNotHeld],
// or [ErrDeadline]), or released, with [ErrReleased]. It carries the token
// ([token.FromContext]), the lease's end for the resource side
// ([token.Expiry]) and the hold, for re-entrant acquires.
func (l *Lease) Context() context.Context { return l.h.ctx }

// Deadline is the local deadline on the Guard's clock: the lease counts as
// lost then unless a renewal succeeds before.
func (l *Lease) Deadline() time.Time {
	l.h.mu.Lock()
	defer l.h.mu.Unlock()
	return l.h.deadline
}

// Unwrap returns the locker's own lease underneath, for what only the
// backend offers — an etcd grant's ownership comparison for a
// transaction of one's own, a ZooKeeper znode's path. Use it to read, not
// to renew or release: the Guard does both, and a Release behind its back
// ends the lease without its context knowing. [locks.LeaseAs] finds a
// backend's type through wrappers (tracing) too:
//
//	el, ok := locks.LeaseAs[*etcdlock.Lease](lease.Unwrap())
//
// A nested hold returns the outermost hold's lease.
func (l *Lease) Unwrap() locks.Lease { return l.h.lease }

// Release cancels the lease context, stops the keep-alive and releases the
// lock at once, without waiting for a renewal in flight (a late renewal
// finds the grant gone: renewals are conditional on ownership); then it
// waits for the keep-alive to end, while ctx lasts. It returns an error wrapping [ErrLost] when the lease had been
// lost (or the release found it no longer held), and an error from the
// locker when the release could not be made; the lock then expires at the
// end of its TTL. Releasing a nested hold does nothing but report a loss.
// Release is idempotent: later calls return the first call's result.
func (l *Lease) Release(ctx context.Context) error {
	l.once.Do(func() {
		if l.nested {
			l.relErr = loss(l.h.ctx)
			return
		}
		l.relErr = l.h.release(ctx)
	})
	return l.relErr
}

// loss returns ctx's cause when it is a loss, else nil.
func loss(ctx context.Context) error {
	if cause := context.Cause(ctx); errors.Is(cause, ErrLost) {
		return cause
	}
	return nil
}

type state int

const (
	held state = iota
	lost
	released
)

// hold is one grant kept alive by one goroutine.
type hold struct {
	g      *Guard
	lease  locks.Lease
	ctx    context.Context
	cancel context.CancelCauseFunc
	since  time.Time     // on the Guard's clock
	timer  Timer         // fires at the local deadline
	done   chan struct{} // closed when the keep-alive goroutine exits

	mu       sync.Mutex
	state    state     // guarded by mu
	ended    time.Time // guarded by mu; when the lease was lost or released (real clock)
	deadline time.Time // guarded by mu
	lastErr  error     // guarded by mu; the last renewal error
}

type holdKey struct {
	g   *Guard
	key string
}

func heldIn(ctx context.Context, g *Guard, key string) *hold {
	h, _ := ctx.Value(holdKey{g, key}).(*hold)
	return h
}

// hold starts keeping l alive, or returns nil when l's local deadline has
// already passed.
func (g *Guard) hold(ctx context.Context, l locks.Lease, start time.Time) *hold {
	left := time.Until(l.Deadline()) - g.drift
	if left <= 0 {
		return nil
	}
	now := g.o.Clock.Now()
	h := &hold{g: g, lease: l, since: now, deadline: now.Add(left), done: make(chan struct{})}
	hctx := context.WithValue(token.NewContext(context.WithoutCancel(ctx), l.Key(), l.Token()), holdKey{g, l.Key()}, h)
	hctx = token.WithExpiry(hctx, within(hctx, h.expiry))
	h.ctx, h.cancel = context.WithCancelCause(hctx)
	h.mu.Lock() // the timer may fire before AfterFunc returns
	h.timer = g.o.Clock.AfterFunc(left, func() { h.lose(ErrDeadline) })
	h.mu.Unlock()
	g.observe(Event{Kind: Acquired, Key: l.Key(), Token: l.Token(), Duration: now.Sub(start)})
	go h.keepAlive()
	return h
}

// expiry is the lease's end for the resource side ([token.Expiry]): the
// locker's expiry estimate less TTL·Drift, on the real clock, while the
// lease is held; when it was lost or released after that.
func (h *hold) expiry() time.Time {
	h.mu.Lock()
	st, ended := h.state, h.ended
	h.mu.Unlock()
	if st != held {
		return ended
	}
	return h.lease.Deadline().Add(-h.g.drift)
}

func (h *hold) keepAlive() {
	defer close(h.done)
	o := &h.g.o
	t := o.Clock.NewTimer(o.RenewInterval)
	defer t.Stop()
	var lost <-chan struct{} // nil (never ready) unless the backend reports losses
	if n, ok := h.lease.(locks.LossNotifier); ok {
		lost = n.Lost()
	}
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-lost:
			h.lose(fmt.Errorf("%w: the locker reported the lease lost (a session or watch of its client ended)", locks.ErrNotHeld))
			return
		case <-t.Chan():
		}
		if h.ctx.Err() != nil {
			return // released or lost while the timer fired
		}
		start := o.Clock.Now()
		// Bounded by the lease's local deadline: a renewal that answers
		// later is worth nothing, and some clients (go-redis) bound a call
		// only by its context's deadline, not by its cancellation, so a
		// renewal to a frozen server would hold up Release.
		rctx, cancel := context.WithDeadline(h.ctx, h.lease.Deadline().Add(-h.g.drift))
		err := h.lease.Renew(rctx)
		cancel()
		switch {
		case h.ctx.Err() != nil:
			return // released or lost meanwhile; the renewal does not count
		case err == nil:
			h.renewed(o.Clock.Now().Sub(start))
			t.Reset(o.RenewInterval)
		case errors.Is(err, locks.ErrNotHeld):
			h.lose(err)
			return
		default:
			h.mu.Lock()
			h.lastErr = err
			h.mu.Unlock()
			h.g.observe(Event{Kind: RenewFailed, Key: h.lease.Key(), Token: h.lease.Token(), Duration: o.Clock.Now().Sub(start), Err: err})
			// Retry sooner; the deadline timer ends the lease if this
			// goes on too long.
			t.Reset(max(o.RenewInterval/4, time.Millisecond))
		}
	}
}

func (h *hold) renewed(took time.Duration) {
	left := time.Until(h.lease.Deadline()) - h.g.drift
	if left <= 0 {
		h.lose(ErrDeadline) // the renewal itself took too long
		return
	}
	h.mu.Lock()
	if h.state == held {
		h.deadline = h.g.o.Clock.Now().Add(left)
		h.lastErr = nil
		h.timer.Reset(left)
	}
	h.mu.Unlock()
	h.g.observe(Event{Kind: Renewed, Key: h.lease.Key(), Token: h.lease.Token(), Duration: took})
}

func (h *hold) lose(reason error) {
	h.mu.Lock()
	if h.state != held {
		h.mu.Unlock()
		return
	}
	h.state = lost
	h.ended = time.Now()
	if errors.Is(reason, ErrDeadline) && h.lastErr != nil {
		reason = fmt.Errorf("%w; last renewal: %w", reason, h.lastErr)
	}
	h.timer.Stop()
	h.mu.Unlock()
	err := &lostError{key: h.lease.Key(), token: h.lease.Token(), err: reason}
	h.cancel(err)
	h.g.observe(Event{Kind: Lost, Key: err.key, Token: err.token, Duration: h.g.o.Clock.Now().Sub(h.since), Err: err})
}

func (h *hold) release(ctx context.Context) error {
	h.mu.Lock()
	wasHeld := h.state == held
	if wasHeld {
		h.state = released
		h.ended = time.Now()
	}
	h.mu.Unlock()
	if wasHeld {
		h.cancel(ErrReleased)
	}
	h.timer.Stop()
	// The release goes out at once, also with a renewal in flight: a
	// renewal extends only this grant, which the release deletes, and one
	// that arrives after the release finds it gone. Waiting for the
	// renewal would keep the lock from the next holder for as long as the
	// renewal takes, up to the lease's deadline.
	err := h.lease.Release(ctx)
	// Then the keep-alive is waited for while ctx lasts, so that no
	// renewal is in flight when Release returns; it sends no new one.
	select {
	case <-h.done:
	case <-ctx.Done():
	}
	if !wasHeld {
		// Lost earlier. The release above was best effort, to free the
		// lock sooner if the server still had it.
		return context.Cause(h.ctx)
	}
	held := h.g.o.Clock.Now().Sub(h.since)
	if errors.Is(err, locks.ErrNotHeld) {
		lostErr := &lostError{key: h.lease.Key(), token: h.lease.Token(), err: err}
		h.g.observe(Event{Kind: Lost, Key: lostErr.key, Token: lostErr.token, Duration: held, Err: lostErr})
		return lostErr
	}
	if err != nil {
		err = fmt.Errorf("guard: release %q: %w", h.lease.Key(), err)
	}
	h.g.observe(Event{Kind: Released, Key: h.lease.Key(), Token: h.lease.Token(), Duration: held, Err: err})
	return err
}
