package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/token"
)

// Options configure a [Guard]. The zero value of each field selects its
// default.
type Options struct {
	// TTL is the lease duration asked of the locker. Default 15s.
	TTL time.Duration

	// RenewInterval is how often the keep-alive renews. Default TTL/3. It
	// must be shorter than the local deadline, TTL·(1-Drift).
	RenewInterval time.Duration

	// Drift is the fraction of the TTL the local deadline keeps in hand
	// for clock drift between this process and the lock service: the
	// lease counts as lost TTL·Drift before the locker's expiry estimate.
	// Default 0.01; at most 0.5.
	Drift float64

	// MinBackoff and MaxBackoff bound the wait between attempts when
	// Acquire meets a transient error (the lock service unreachable).
	// Waits double from MinBackoff up to MaxBackoff, with full jitter.
	// Defaults 10ms and 1s.
	MinBackoff, MaxBackoff time.Duration

	// Clock drives renewals and the local deadline. Default: the real
	// clock. Tests inject a fake one to jump time.
	Clock Clock

	// Observer, when set, is called synchronously for every [Event]. It
	// must be quick and must not call back into the Guard. Package
	// metrics/prom turns events into Prometheus metrics.
	Observer func(Event)

	// Logger receives what an operator should know: a lease lost (Warn),
	// a renewal failing (Warn), the lock service unreachable while
	// acquiring (Warn, once per Acquire), an acquire giving up on an
	// error or a release failing (Info). Successes and expected outcomes
	// are not news: a TryAcquire that finds the lock held, or an Acquire
	// whose context ends while it waits its turn, log at Debug only.
	// Default slog.Default(); use slog.New(slog.DiscardHandler) to
	// silence it.
	Logger *slog.Logger
}

// Guard acquires leases from a locker and keeps them alive.
type Guard struct {
	locker locks.Locker
	o      Options
	drift  time.Duration // TTL·Drift
}

// New returns a Guard over l. It fails with an error wrapping
// [locks.ErrInvalidArgument] when o is inconsistent or o.TTL is below the
// locker's minimum ([locks.MinTTLer]).
func New(l locks.Locker, o Options) (*Guard, error) {
	if l == nil {
		return nil, fmt.Errorf("guard: %w: nil locker", locks.ErrInvalidArgument)
	}
	if o.TTL == 0 {
		o.TTL = 15 * time.Second
	}
	if o.Drift == 0 {
		o.Drift = 0.01
	}
	if o.RenewInterval == 0 {
		o.RenewInterval = o.TTL / 3
	}
	if o.MinBackoff == 0 {
		o.MinBackoff = 10 * time.Millisecond
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = time.Second
	}
	if o.Clock == nil {
		o.Clock = realClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	switch {
	case o.TTL < 0:
		return nil, fmt.Errorf("guard: %w: negative TTL %v", locks.ErrInvalidArgument, o.TTL)
	case o.Drift < 0 || o.Drift > 0.5:
		return nil, fmt.Errorf("guard: %w: Drift %v outside [0, 0.5]", locks.ErrInvalidArgument, o.Drift)
	case o.RenewInterval < 0 || float64(o.RenewInterval) >= float64(o.TTL)*(1-o.Drift):
		return nil, fmt.Errorf("guard: %w: RenewInterval %v must be positive and below TTL·(1-Drift) = %v",
			locks.ErrInvalidArgument, o.RenewInterval, time.Duration(float64(o.TTL)*(1-o.Drift)))
	case o.MinBackoff < 0 || o.MaxBackoff < o.MinBackoff:
		return nil, fmt.Errorf("guard: %w: backoff %v..%v", locks.ErrInvalidArgument, o.MinBackoff, o.MaxBackoff)
	}
	if m := locks.MinTTL(l); o.TTL < m {
		return nil, fmt.Errorf("guard: %w: TTL %v is below the locker's minimum %v", locks.ErrInvalidArgument, o.TTL, m)
	}
	return &Guard{locker: l, o: o, drift: time.Duration(float64(o.TTL) * o.Drift)}, nil
}

// Errors of this package, tested with [errors.Is].
var (
	// ErrLost is the cause of a lease context cancelled because the lease
	// was lost (see [Lease.Context]), and what Do and Release return then.
	ErrLost = errors.New("lease lost")
	// ErrReleased is the cause of a lease context cancelled by Release.
	ErrReleased = errors.New("lease released")
	// ErrDeadline is why a lease is lost when renewals failed until the
	// local deadline passed.
	ErrDeadline = errors.New("local deadline passed without a successful renewal")
)

// lostError is the cause of a lease context cancelled because the lease was
// lost. It unwraps to [ErrLost] and to the reason: an error wrapping
// [locks.ErrNotHeld] when a renewal or release was refused, or
// [ErrDeadline] (with the last renewal error) when renewals failed for too
// long.
type lostError struct {
	key   string
	token token.Token
	err   error
}

func (e *lostError) Error() string {
	return fmt.Sprintf("lease on %q (token %d) lost: %v", e.key, e.token, e.err)
}

func (e *lostError) Unwrap() []error { return []error{ErrLost, e.err} }

// Acquire blocks until the lock on key is granted or ctx ends, and returns
// the lease with its keep-alive running. Transient errors are retried with
// backoff until ctx ends; invalid arguments and a locker whose token
// counter reached its ceiling ([token.ErrRange]) are not. When ctx already
// carries a lease on key from this Guard, Acquire returns a nested hold of
// it at once (see "Re-entrancy" in the package doc).
//
// The lease outlives ctx: cancelling ctx after Acquire returns does not
// release it. Its context keeps ctx's values.
func (g *Guard) Acquire(ctx context.Context, key string) (*Lease, error) {
	return g.acquire(ctx, key, g.locker.Acquire)
}

// TryAcquire is Acquire making one attempt: it returns an error wrapping
// [locks.ErrNotObtained] when the lock is held, and does not retry
// transient errors.
func (g *Guard) TryAcquire(ctx context.Context, key string) (*Lease, error) {
	return g.acquire(ctx, key, func(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
		l, err := g.locker.TryAcquire(ctx, key, ttl)
		if err != nil {
			err = permanent{err}
		}
		return l, err
	})
}

// permanent marks an error Acquire must not retry.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

func (g *Guard) acquire(ctx context.Context, key string, try func(context.Context, string, time.Duration) (locks.Lease, error)) (*Lease, error) {
	if h := heldIn(ctx, g, key); h != nil {
		if err := h.ctx.Err(); err != nil {
			return nil, fmt.Errorf("guard: acquire %q inside a lease that ended: %w", key, context.Cause(h.ctx))
		}
		return &Lease{h: h, nested: true}, nil
	}
	start := g.o.Clock.Now()
	backoff := g.o.MinBackoff
	warned := false // once per acquire
	// lastErr is the last attempt's error that was not the context ending:
	// the root cause the final error keeps when the context ends.
	var lastErr error
	for {
		l, err := try(ctx, key, g.o.TTL)
		if err == nil {
			if h := g.hold(ctx, l, start); h != nil {
				return &Lease{h: h}, nil
			}
			// The grant came too late to be of use (the call outlasted the
			// TTL): give it back, in the background, and try again.
			g.releaseLate(ctx, l)
			err = fmt.Errorf("granted after its local deadline had passed: %w", ErrDeadline)
		}
		if ctx.Err() == nil || !isContextErr(err) {
			lastErr = err
		}
		var p permanent
		// A bad argument, or a token counter at its ceiling, will not mend
		// by retrying.
		if ctx.Err() == nil && !errors.Is(err, locks.ErrInvalidArgument) && !errors.Is(err, token.ErrRange) && !errors.As(err, &p) {
			if !warned {
				warned = true
				g.o.Logger.Warn("fenceguard: lock service unreachable; retrying", "key", key, "err", err)
			}
			wait := rand.N(backoff + 1)
			backoff = min(2*backoff, g.o.MaxBackoff)
			t := g.o.Clock.NewTimer(wait)
			select {
			case <-t.Chan():
				continue
			case <-ctx.Done():
				t.Stop()
			}
		}
		if ctx.Err() != nil && lastErr != nil && !errors.Is(lastErr, ctx.Err()) {
			// Keep the root cause: "context deadline exceeded (last
			// attempt: dial tcp …: connection refused)", errors.Is true
			// for both.
			err = fmt.Errorf("%w (last attempt: %w)", ctx.Err(), lastErr)
		}
		waited := g.o.Clock.Now().Sub(start)
		g.observe(Event{Kind: AcquireFailed, Key: key, Duration: waited, Err: err})
		level := slog.LevelInfo
		if errors.Is(err, locks.ErrNotObtained) || (lastErr == nil && isContextErr(err)) {
			// The lock held (TryAcquire), or the context ending while the
			// acquire waited its turn: outcomes the caller asked for, not
			// news.
			level = slog.LevelDebug
		}
		g.o.Logger.Log(ctx, level, "fenceguard: acquire gave up", "key", key, "waited", waited, "err", err)
		return nil, fmt.Errorf("guard: acquire %q: %w", key, err)
	}
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// releaseGrace is how long a call whose context has ended still waits for
// a release it started before leaving it to finish in the background.
const releaseGrace = 50 * time.Millisecond

// releaseBound is the context of a release that must not be cut short by
// the caller's context ending: ctx's values, ending when the lock would
// expire on its own anyway (the locker's deadline of l), and at least a
// second from now.
func releaseBound(ctx context.Context, l locks.Lease) (context.Context, context.CancelFunc) {
	return context.WithDeadline(context.WithoutCancel(ctx), later(l.Deadline(), time.Now().Add(time.Second)))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// releaseLate gives back a grant that came too late to use, in the
// background: the acquire goes on (or returns) at once.
func (g *Guard) releaseLate(ctx context.Context, l locks.Lease) {
	rctx, cancel := releaseBound(ctx, l)
	go func() {
		defer cancel()
		_ = l.Release(rctx)
	}()
}

// Do acquires key, runs fn, and releases the lock, also when fn panics.
// fn's context is ctx carrying the token ([token.FromContext]), the lease's
// end ([token.Expiry]: enforcers such as the PostgreSQL adapter end what
// they hold for fn with the lease) and the hold (for re-entrancy); it is
// cancelled with a cause wrapping [ErrLost] if the lease is lost. Do returns
// fn's error joined with the release's: when the lease was lost,
// errors.Is(err, ErrLost) holds even if fn returned nil. The error then
// says whether fn's work may have been kept: fn returning nil means that
// what it did may have taken effect, unless fn's own error says otherwise
// (a fenced transaction refused at its lease's end says nothing of it
// committed).
func (g *Guard) Do(ctx context.Context, key string, fn func(ctx context.Context, t token.Token) error) (err error) {
	lease, err := g.Acquire(ctx, key)
	if err != nil {
		return err
	}
	return g.run(ctx, lease.Context(),
		func(c context.Context) context.Context {
			c = context.WithValue(token.NewContext(c, key, lease.Token()), holdKey{g, key}, lease.h)
			return token.WithExpiry(c, within(c, lease.h.expiry))
		},
		func() error { return g.release(ctx, lease) },
		func(fctx context.Context) error { return fn(fctx, lease.Token()) })
}

// run is the body of Do and DoAll: it runs fn on a context made from ctx
// by with, cancelled with lost's cause when lost ends, then calls release,
// also when fn panics, and joins its error to fn's.
func (g *Guard) run(ctx, lost context.Context, with func(context.Context) context.Context, release func() error, fn func(context.Context) error) (err error) {
	fnErr := errFnPending
	defer func() {
		rerr := release()
		if rerr != nil && errors.Is(rerr, ErrLost) && fnErr == nil {
			rerr = &mayHaveTakenEffect{rerr}
		}
		err = errors.Join(err, rerr)
	}()
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(lost, func() { cancel(context.Cause(lost)) })
	defer stop()
	fnErr = fn(with(fctx))
	return fnErr
}

// within returns an expiry that is own's, or the end that ctx's enclosing
// critical section reports ([token.Expiry]) when that comes first. A
// context that carries an enclosing section's tokens must not outlive its
// leases: a section nested in another (Do in DoAll, DoAll in Do, an
// Acquire inside either) reports the earliest end of them all.
func within(ctx context.Context, own func() time.Time) func() time.Time {
	if _, ok := token.Expiry(ctx); !ok {
		return own
	}
	return func() time.Time {
		e := own()
		if outer, ok := token.Expiry(ctx); ok && outer.Before(e) {
			e = outer
		}
		return e
	}
}

// errFnPending is Do's record of fn's result while fn runs (or panics).
var errFnPending = errors.New("fn did not return")

// mayHaveTakenEffect is the loss Do reports when fn returned nil.
type mayHaveTakenEffect struct{ err error }

func (e *mayHaveTakenEffect) Error() string {
	return e.err.Error() + " (fn returned nil: its work may have taken effect)"
}

func (e *mayHaveTakenEffect) Unwrap() error { return e.err }

// release is Do's release. The caller's ctx may be done, and the release
// must still happen: it runs on a context of its own, bounded by the
// lock's own expiry (releaseBound). Do waits for it while ctx lives (and
// releaseGrace after); past that it returns — within ctx's deadline — and
// the release finishes in the background. A loss of the lease is
// reported either way.
func (g *Guard) release(ctx context.Context, lease *Lease) error {
	rctx, cancel := releaseBound(ctx, lease.h.lease)
	done := make(chan error, 1)
	go func() {
		defer cancel()
		done <- lease.Release(rctx)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	t := time.NewTimer(releaseGrace)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return loss(lease.Context()) // lost before the release began, or nil
	}
}

func (g *Guard) observe(e Event) {
	if g.o.Observer != nil {
		g.o.Observer(e)
	}
	log := g.o.Logger
	switch {
	case e.Kind == Lost:
		log.Warn("fenceguard: lease lost", "key", e.Key, "token", uint64(e.Token), "held", e.Duration, "cause", e.Err)
	case e.Kind == RenewFailed:
		log.Warn("fenceguard: lease renewal failed; the lease lives until its local deadline",
			"key", e.Key, "token", uint64(e.Token), "err", e.Err)
	case e.Kind == Released && e.Err != nil:
		log.Info("fenceguard: release failed; the lock expires at the end of its TTL", "key", e.Key, "token", uint64(e.Token), "err", e.Err)
	}
}
