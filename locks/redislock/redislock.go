package redislock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock/internal/cleanup"
	"github.com/fenceguard/fenceguard/locks/redislock/internal/ctxerr"
	"github.com/fenceguard/fenceguard/locks/redislock/internal/detach"
	"github.com/fenceguard/fenceguard/locks/redislock/internal/lease"
	"github.com/fenceguard/fenceguard/locks/redislock/internal/rnotify"
	"github.com/fenceguard/fenceguard/token"
)

// Client is what the locker needs of a Redis client. *redis.Client,
// *redis.ClusterClient, *redis.Ring and every [redis.UniversalClient]
// satisfy it.
type Client interface {
	redis.Scripter
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// minTTL is the shortest lease redislock grants: Redis expires keys with
// millisecond resolution.
const minTTL = time.Millisecond

// MaxToken is the ceiling of redislock's tokens, 2^63−1, so that every
// token fits a signed 64-bit column (PostgreSQL's bigint among them). A
// grant that would pass it fails with an error wrapping a
// [*token.RangeError]; only [Locker.Heal] brings a counter near it.
const MaxToken = token.MaxInt64

// maxHeal is the largest target Heal accepts.
const maxHeal = MaxToken - 1

// errClosed is the error of calls on a closed Locker.
var errClosed = fmt.Errorf("redislock: %w", locks.ErrClosed)

// Options configure a [Locker]. Zero fields select defaults.
type Options struct {
	// Prefix starts every key and channel the locker uses. Default
	// "fenceguard:lock:".
	Prefix string

	// WaiterTTL is how long a waiter's place in the queue survives without
	// a heartbeat; live waiters refresh it every WaiterTTL/3. It bounds how
	// long a waiter that died (or lost its connection) can hold up the
	// queue. Default 3s.
	WaiterTTL time.Duration

	// CounterIdle is how long a key's token counter and its heal offset
	// (one small key, "token" or "token:offset" when the key was healed
	// above the clock) survive after the last grant. Past it the counter is gone
	// and the next token comes from the server clock alone (still larger,
	// unless the clock went back or the key had been healed above the
	// clock: then the resource refuses it as stale and the holder heals
	// again). Default 1h.
	CounterIdle time.Duration

	// LockDelay keeps the lock from everyone else for this long past the
	// Deadline of a lease that ended without a Release (expired, or its
	// renewal refused): the lock key lives TTL + LockDelay on the server
	// while the lease's TTL and Deadline count the TTL alone. A Release
	// hands the lock over at once. 0, the default: no delay. At most
	// [locks.MaxLockDelay]. See "Lock-delay" in the package doc.
	LockDelay time.Duration
}

// Locker is a [locks.Locker] on one Redis deployment (a single node,
// Sentinel or Cluster). It is safe for concurrent use. Close it when done:
// blocked acquires share one pub/sub connection, read by one goroutine.
type Locker struct {
	client Client
	o      Options
	notify waker

	// The scripts' arguments that never change, boxed once: the counter's
	// idle time and WaiterTTL in ms.
	idleArg, waiterArg any

	cleanup cleanup.Group // background clean-ups
	bg      detach.Group  // commands a cancel left running

	closed atomic.Bool // set by Close: acquires fail with errClosed
}

var _ locks.Locker = (*Locker)(nil)

var _ locks.MinTTLer = (*Locker)(nil)

// MinTTL implements [locks.MinTTLer]: a millisecond, Redis's resolution.
func (l *Locker) MinTTL() time.Duration { return minTTL }

// New returns a Locker using client. It fails with an error wrapping
// [locks.ErrInvalidArgument] when the options are inconsistent.
func New(client Client, o Options) (*Locker, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", locks.ErrInvalidArgument)
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.WaiterTTL == 0 {
		o.WaiterTTL = 3 * time.Second
	}
	if o.CounterIdle == 0 {
		o.CounterIdle = time.Hour
	}
	if o.WaiterTTL < 30*time.Millisecond || o.CounterIdle < time.Second {
		return nil, fmt.Errorf("%w: WaiterTTL %v (min 30ms), CounterIdle %v (min 1s)", locks.ErrInvalidArgument, o.WaiterTTL, o.CounterIdle)
	}
	if err := locks.CheckLockDelay(o.LockDelay); err != nil {
		return nil, fmt.Errorf("redislock: %w", err)
	}
	notify := notifier(client)
	if _, ok := client.(stateReloader); ok {
		client = reloadingClient{client}
	}
	return &Locker{client: client, o: o, notify: notify, idleArg: ms(o.CounterIdle), waiterArg: ms(o.WaiterTTL)}, nil
}

// Close stops the pub/sub reader and fails blocked and later acquires with
// an error matching [locks.ErrClosed]. It waits for the commands that
// calls cut short by a cancel left running (each ends with its reply, by
// the client's ReadTimeout, or at the client's Close) and for their
// clean-ups. Leases already granted stay usable (renew, release). Close is
// idempotent.
func (l *Locker) Close() error {
	l.closed.Store(true)
	l.notify.Close()
	l.cleanup.Close() // each is bounded by cleanup.Timeout
	l.bg.Wait()
	return nil
}

type lockKeys struct {
	all     []string // lock, counter (with the heal offset), queue, deadlines
	channel string
}

// bound returns the keys of the scripts that read the counter (and its
// offset): lock, counter.
func (k lockKeys) bound() []string { return k.all[:2] }

// DefaultPrefix is the key prefix of a [Locker] and a [Sequencer] whose
// prefix is empty.
const DefaultPrefix = "fenceguard:lock:"

func keysFor(prefix, key string) lockKeys {
	// One allocation for the five names: base is a prefix of base:tok,
	// base:q of base:qd.
	b := len(prefix) + len(key) + 2
	s := prefix + "{" + key + "}:tok" + prefix + "{" + key + "}:qd" + prefix + "{" + key + "}:wake"
	tok, qd := s[:b+4], s[b+4:2*b+7]
	return lockKeys{
		all:     []string{tok[:b], tok, qd[:b+2], qd},
		channel: s[2*b+7:],
	}
}

func (l *Locker) keys(key string) lockKeys { return keysFor(l.o.Prefix, key) }

func newID() string {
	return strconv.FormatUint(rand.Uint64(), 36) + "." + strconv.FormatUint(rand.Uint64(), 36)
}

func ms(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// px is the lock key's expiry on the server, in ms, for a lease of ttl:
// ttl plus the lock-delay. Every script that sets or extends the lock
// (acquire, hand-over through the queue member "id|px", renew) uses it.
func (l *Locker) px(ttl time.Duration) int64 { return ms(ttl + l.o.LockDelay) }

// result of one run of the acquire script.
type result int

const (
	waiting    result = iota // not granted; queued when asked to
	granted                  // granted by this very request
	handedOver               // granted earlier, by a release's hand-over
)

// outcome is what one run of the acquire script reported.
type outcome struct {
	res    result
	tok    token.Token   // granted, handedOver: the token the lock holds
	wait   time.Duration // waiting: how long until another attempt is worth making
	joined bool          // waiting: the waiter was not in the queue and joined it
}

// rangeErr is the error of a grant the counter, at the ceiling, cannot
// mint.
func rangeErr() error {
	return fmt.Errorf("token counter, or its healed clock floor, at the ceiling (an operator deletes the counter key, <prefix>{<key>}:tok, to start again from the clock): %w",
		&token.RangeError{What: "redislock counter", Token: MaxToken + 1, Max: MaxToken})
}

// attempt runs the acquire script once. When ctx ends first, it returns
// ctx's error at once and the channel that is closed once the script's
// command has finished in the background (see abandon).
func (l *Locker) attempt(ctx context.Context, k lockKeys, id string, ttl time.Duration, enqueue bool) (outcome, <-chan struct{}, error) {
	res, pending, err := detach.Start(&l.bg, ctx, func() ([]any, error) {
		if enqueue {
			return acquireScript.Run(ctx, l.client, k.all, id, l.px(ttl), l.idleArg, l.waiterArg, "1").Slice()
		}
		// All four keys, though the script touches only two: in a
		// Cluster slot that migrates, a TryAcquire of a held lock then waits
		// for the move like every other call (see clusterRun).
		return acquireScript.Run(ctx, l.client, k.all, id, l.px(ttl), l.idleArg).Slice()
	})
	if err != nil {
		return outcome{}, pending, scriptErr(err)
	}
	o, err := readOutcome(res)
	return o, nil, err
}

// readOutcome reads the acquire script's reply.
func readOutcome(res []any) (outcome, error) {
	code, _ := res[0].(int64)
	switch {
	case code == 0 && len(res) == 3:
		wait, _ := res[1].(int64)
		joined, _ := res[2].(int64)
		return outcome{res: waiting, wait: time.Duration(wait) * time.Millisecond, joined: joined == 1}, nil
	case code == 3 && len(res) == 2:
		return outcome{}, rangeErr()
	case (code == 1 || code == 2) && len(res) == 2:
		s, _ := res[1].(string)
		tok, err := token.Parse(s)
		if err != nil {
			return outcome{}, fmt.Errorf("redislock: bad token from the acquire script: %w", err)
		}
		if code == 2 {
			return outcome{res: handedOver, tok: tok}, nil
		}
		return outcome{res: granted, tok: tok}, nil
	}
	return outcome{}, fmt.Errorf("redislock: unexpected acquire reply %v", res)
}

func (l *Locker) lease(k lockKeys, key, id string, tok token.Token, ttl time.Duration, deadline time.Time) *lockLease {
	g := &lockLease{l: l, k: k, val: id + "|" + tok.String()}
	g.Init(key, tok, ttl, deadline)
	return g
}

// abandon removes what a failed acquire may have left behind — its place
// in the queue, or a grant it never learned of — in the background,
// bounded ([cleanup.Group.Run]): a call returns by its context's deadline,
// or its cancel, even when Redis does not answer, and Close waits for the
// clean-up. After an attempt a cancel cut short (pending not nil), it runs
// once that attempt's command has finished, so that it cannot run before
// the grant or the queueing it is to undo.
func (l *Locker) abandon(ctx context.Context, pending <-chan struct{}, k lockKeys, id string, ttl time.Duration) {
	member := id + "|" + strconv.FormatInt(l.px(ttl), 10)
	var after []<-chan struct{}
	if pending != nil {
		after = append(after, pending)
	}
	l.cleanup.Run(ctx, after, func(ctx context.Context) {
		_ = abandonScript.Run(ctx, l.client, k.all, id, k.channel, l.idleArg, member).Err()
	})
}

// acquireErr is the error of a failed acquire: ctx's when it ended, and
// the cause besides when that was something else.
func acquireErr(ctx context.Context, key string, err error) error {
	if !errors.Is(err, locks.ErrClosed) {
		err = ctxerr.Wrap(ctx, err)
	}
	return fmt.Errorf("redislock: acquire %q: %w", key, err)
}

// TryAcquire implements [locks.Locker]. It fails with
// [locks.ErrNotObtained] while the lock is held or handed over. One round
// trip; on a Cluster, while the lock's slot migrates, it waits for the
// move (until ctx ends: see "Sentinel and Cluster" in the package doc).
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	if err := locks.CheckArgs(key, ttl, minTTL); err != nil {
		return nil, err
	}
	if l.closed.Load() {
		return nil, errClosed
	}
	if err := checkSlot(l.client, l.o.Prefix, key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	k, id := l.keys(key), newID()
	sent := time.Now()
	o, pending, err := l.attempt(ctx, k, id, ttl, false)
	if err != nil {
		l.abandon(ctx, pending, k, id, ttl) // the grant may have happened and its reply been lost
		return nil, acquireErr(ctx, key, err)
	}
	if o.res != granted {
		return nil, locks.ErrNotObtained
	}
	return l.lease(k, key, id, o.tok, ttl, sent.Add(ttl)), nil
}

// Acquire implements [locks.Locker]. An uncontended acquire is one round
// trip. A contended one joins the key's FIFO queue and sleeps until a
// release hands the lock over to it — the wake-up carries the token, so
// the new holder needs no further round trip — or until the lock's
// remaining TTL, or its queue heartbeat, is up.
//
// A wake-up is taken on trust only while it can belong to nothing but the
// waiter's current place in the queue. Once the waiter had to join the
// queue again (its place was handed a grant it never saw, which ran out,
// or dropped while it was paused), a wake-up may be the news of that old
// grant, arriving late: from then on every wake-up is checked with a round
// trip, which returns the grant the lock holds now, with its token, or
// goes back to waiting.
func (l *Locker) Acquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	if err := locks.CheckArgs(key, ttl, minTTL); err != nil {
		return nil, err
	}
	if l.closed.Load() {
		return nil, errClosed
	}
	if err := checkSlot(l.client, l.o.Prefix, key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	k, id := l.keys(key), newID()
	var pending <-chan struct{} // the attempt a cancel cut short
	fail := func(err error) (locks.Lease, error) {
		l.abandon(ctx, pending, k, id, ttl)
		return nil, acquireErr(ctx, key, err)
	}
	// Listen before queueing, or the hand-over could come first. When other
	// local waiters already listen on the key (it is contended), that costs
	// nothing and the first attempt may queue at once; otherwise try first,
	// so an uncontended acquire is one round trip.
	if !l.notify.Subscribed(k.channel) {
		sent := time.Now()
		o, p, err := l.attempt(ctx, k, id, ttl, false)
		if pending = p; err != nil {
			return fail(err)
		}
		if o.res == granted {
			return l.lease(k, key, id, o.tok, ttl, sent.Add(ttl)), nil
		}
	}
	wake, err := l.notify.Register(ctx, k.channel, id)
	if errors.Is(err, rnotify.ErrClosed) {
		err = errClosed
	}
	if err != nil {
		return nil, fmt.Errorf("redislock: acquire %q: %w", key, err)
	}
	defer l.notify.Unregister(k.channel, id)
	timer := time.NewTimer(0)
	defer timer.Stop()
	var (
		// A hand-over happens after the last request that found us
		// waiting was sent: the grant's conservative start. Heartbeats
		// keep it recent.
		queuedAt time.Time
		// queued: an attempt has put us in the queue. verify: one had to
		// put us there again, so a wake-up may be an old grant's.
		queued, verify bool
	)
	heartbeat := min(l.o.WaiterTTL/3, ttl/3)
	// handed returns the lease of a grant a release handed over, dated
	// from queuedAt; ErrNotHeld when it ran out before we took it.
	handed := func(tok token.Token) (*lockLease, error) {
		s := l.lease(k, key, id, tok, ttl, queuedAt.Add(ttl))
		if time.Until(s.Deadline()) < ttl/2 {
			// The news took long (a pause?): refresh the lease first.
			if err := s.Renew(ctx); err != nil {
				return nil, err
			}
		}
		return s, nil
	}
	for {
		sent := time.Now()
		o, p, err := l.attempt(ctx, k, id, ttl, true)
		pending = p
		switch {
		case err != nil:
			return fail(err)
		case o.res == granted:
			return l.lease(k, key, id, o.tok, ttl, sent.Add(ttl)), nil
		case o.res == handedOver:
			s, err := handed(o.tok)
			if err == nil {
				return s, nil
			}
			if !errors.Is(err, locks.ErrNotHeld) {
				return fail(err)
			}
			continue // it ran out meanwhile: queue again
		}
		if o.joined {
			verify = verify || queued
			queued = true
		}
		queuedAt = sent
		timer.Reset(min(max(o.wait, time.Millisecond), heartbeat))
		select {
		case v := <-wake:
			if v == "" {
				continue
			}
			tok, err := token.Parse(v)
			if verify || err != nil {
				continue // the attempt tells whether, and with which token, we hold the lock
			}
			s, err := handed(tok)
			if err == nil {
				return s, nil
			}
			if !errors.Is(err, locks.ErrNotHeld) {
				return fail(err)
			}
		case <-timer.C:
		case <-l.notify.Done():
			return fail(errClosed)
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
}

// Heal raises key's token counter to at least to, so the next grant's token
// is above it. Call it with [token.StaleError.Current] when a resource
// refused a token because the counter went back (lost with a restart, and
// the server clock behind the resource's high-water). It returns the
// counter after healing. Targets above MaxToken − 1 are refused with an
// error wrapping both [locks.ErrInvalidArgument] and a [*token.RangeError],
// and change nothing.
//
// A healed key's tokens keep growing with the server clock, ahead of it by
// the heal's lead (stored with the counter), also across a failover that
// loses a grant. They reach [MaxToken] (MaxToken − counter) µs after the
// heal; grants then fail with a [*token.RangeError] until an operator
// deletes the counter's key, <prefix>{<key>}:tok. A heal lost with a
// failover brings tokens back below the mark: the resource refuses them
// as stale, and the holder heals again.
func (l *Locker) Heal(ctx context.Context, key string, to token.Token) (token.Token, error) {
	if key == "" {
		return 0, fmt.Errorf("%w: heal: empty key", locks.ErrInvalidArgument)
	}
	if err := checkSlot(l.client, l.o.Prefix, key); err != nil {
		return 0, err
	}
	if to > maxHeal {
		return 0, fmt.Errorf("%w: heal %q to %d: %w", locks.ErrInvalidArgument, key, to,
			&token.RangeError{What: "redislock heal target", Token: to, Max: maxHeal})
	}
	s, err := detach.Call(&l.bg, ctx, func() (string, error) {
		return healScript.Run(ctx, l.client, l.keys(key).bound(), to.String(), l.idleArg).Text()
	})
	if err != nil {
		return 0, fmt.Errorf("redislock: heal %q: %w", key, ctxerr.Wrap(ctx, scriptErr(err)))
	}
	return token.Parse(s)
}

// Issued returns an upper bound of every token granted for key so far: its
// counter, or the clock floor when that is larger (the server clock in µs
// plus the key's heal offset, at most [MaxToken]; see [Locker.Heal]), or
// the token of the grant holding the lock when that is larger still (a
// healed key's counter idles out after CounterIdle, a lease may outlive
// it). A presented token above it was never issued — but for grants
// released after their counter idled out and before a heal. A malformed
// counter is a [*CounterError]. One round trip.
// [Locker.Current] is the tighter bound: a token above the current
// holder's was not granted yet either.
func (l *Locker) Issued(ctx context.Context, key string) (token.Token, error) {
	if key == "" {
		return 0, fmt.Errorf("%w: issued: empty key", locks.ErrInvalidArgument)
	}
	if err := checkSlot(l.client, l.o.Prefix, key); err != nil {
		return 0, err
	}
	s, err := detach.Call(&l.bg, ctx, func() (string, error) {
		return issuedScript.Run(ctx, l.client, l.keys(key).bound()).Text()
	})
	if err != nil {
		return 0, fmt.Errorf("redislock: issued %q: %w", key, ctxerr.Wrap(ctx, scriptErr(err)))
	}
	return token.Parse(s)
}

// Current implements [token.Sequencer] on the Locker's client and prefix;
// see [Sequencer].
func (l *Locker) Current(ctx context.Context, key string) (token.Token, error) {
	return current(ctx, &l.bg, l.client, l.o.Prefix, key)
}

// lockLease is a redislock lease.
type lockLease struct {
	lease.State
	l   *Locker
	k   lockKeys
	val string // the value stored in the lock key, "id|token": this grant's identity
}

var _ locks.Lease = (*lockLease)(nil)

// Renew implements [locks.Lease]. One round trip; it extends the lock only
// while it still holds this very grant.
func (s *lockLease) Renew(ctx context.Context) error {
	if s.Released() {
		return locks.NotHeldError("renew", s.Key(), s.Token())
	}
	sent := time.Now()
	n, err := detach.Call(&s.l.bg, ctx, func() (int, error) {
		return renewScript.Run(ctx, s.l.client, s.k.all[:1], s.val, s.l.px(s.TTL())).Int()
	})
	if err != nil {
		return fmt.Errorf("redislock: renew %q: %w", s.Key(), ctxerr.Wrap(ctx, err))
	}
	if n != 1 {
		return locks.NotHeldError("renew", s.Key(), s.Token())
	}
	s.Extend(sent.Add(s.TTL()))
	return nil
}

// Release implements [locks.Lease]. One round trip, which also wakes the
// next waiter; it releases the lock only while it still holds this very
// grant. On a Cluster, while the lock's slot migrates, it waits for the
// move until ctx ends (see "Sentinel and Cluster" in the package doc):
// give ctx a deadline.
func (s *lockLease) Release(ctx context.Context) error {
	s.Releasing.Lock()
	defer s.Releasing.Unlock()
	if s.Released() {
		return nil
	}
	n, err := detach.Call(&s.l.bg, ctx, func() (int, error) {
		return releaseScript.Run(ctx, s.l.client, s.k.all, s.val, s.k.channel, s.l.idleArg).Int()
	})
	if err != nil {
		return fmt.Errorf("redislock: release %q: %w", s.Key(), ctxerr.Wrap(ctx, scriptErr(err)))
	}
	if n != 1 {
		return locks.NotHeldError("release", s.Key(), s.Token())
	}
	s.SetReleased()
	return nil
}
