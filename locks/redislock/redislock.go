package redislock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/internal/rnotify"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/token"
)

// Client is what the locker needs of a Redis client. *redis.Client,
// *redis.ClusterClient, *redis.Ring and every [redis.UniversalClient]
// satisfy it.
type Client interface {
	redis.Scripter
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// MinTTL is the shortest lease redislock grants: Redis expires keys with
// millisecond resolution.
const MinTTL = time.Millisecond

// MaxHeal is the largest counter [Locker.Heal] can set: the scripts do
// arithmetic in Lua doubles, exact up to 2^53.
const MaxHeal token.Token = 1 << 53

// ErrClosed is returned by calls on a closed Locker.
var ErrClosed = errors.New("redislock: locker closed")

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

	// CounterIdle is how long a key's token counter survives after the
	// last grant. Past it the counter is gone and the next token comes
	// from the server clock alone (still larger, unless the clock went
	// back). Default 1h.
	CounterIdle time.Duration
}

// Locker is a [locks.Locker] on one Redis deployment (a single node,
// Sentinel or Cluster). It is safe for concurrent use. Close it when done:
// blocked acquires share one pub/sub connection, read by one goroutine.
type Locker struct {
	client Client
	o      Options
	notify *rnotify.Notifier
}

var _ locks.Locker = (*Locker)(nil)

// New returns a Locker using client. It fails with an error wrapping
// [locks.ErrInvalid] when the options are inconsistent.
func New(client Client, o Options) (*Locker, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", locks.ErrInvalid)
	}
	if o.Prefix == "" {
		o.Prefix = "fenceguard:lock:"
	}
	if o.WaiterTTL == 0 {
		o.WaiterTTL = 3 * time.Second
	}
	if o.CounterIdle == 0 {
		o.CounterIdle = time.Hour
	}
	if o.WaiterTTL < 30*time.Millisecond || o.CounterIdle < time.Second {
		return nil, fmt.Errorf("%w: WaiterTTL %v (min 30ms), CounterIdle %v (min 1s)", locks.ErrInvalid, o.WaiterTTL, o.CounterIdle)
	}
	return &Locker{client: client, o: o, notify: rnotify.New(client)}, nil
}

// Close stops the pub/sub reader and fails blocked and later acquires with
// [ErrClosed]. Leases already granted stay usable (renew, release). Close
// is idempotent.
func (l *Locker) Close() error {
	l.notify.Close()
	return nil
}

type lockKeys struct {
	all     []string // lock, counter, queue, deadlines
	channel string
}

func (l *Locker) keys(key string) lockKeys {
	base := l.o.Prefix + "{" + key + "}"
	return lockKeys{
		all:     []string{base, base + ":tok", base + ":q", base + ":qd"},
		channel: base + ":wake",
	}
}

func newID() string {
	return strconv.FormatUint(rand.Uint64(), 36) + "." + strconv.FormatUint(rand.Uint64(), 36)
}

func ms(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// attempt runs the acquire script once. It returns the lease when granted,
// otherwise how long to wait before the next attempt is worth making.
func (l *Locker) attempt(ctx context.Context, k lockKeys, key, id string, ttl time.Duration, enqueue bool) (*Lease, time.Duration, error) {
	q := "0"
	if enqueue {
		q = "1"
	}
	sent := time.Now()
	res, err := acquireScript.Run(ctx, l.client, k.all, id, ms(ttl), ms(l.o.CounterIdle), ms(l.o.WaiterTTL), q).Slice()
	if err != nil {
		return nil, 0, err
	}
	if len(res) != 2 {
		return nil, 0, fmt.Errorf("redislock: unexpected acquire reply %v", res)
	}
	if ok, _ := res[0].(int64); ok == 1 {
		s, _ := res[1].(string)
		tok, err := strconv.ParseUint(s, 10, 64)
		if err != nil || tok == 0 {
			return nil, 0, fmt.Errorf("redislock: bad token %q from the acquire script", s)
		}
		return &Lease{l: l, k: k, key: key, id: id, tok: token.Token(tok), ttl: ttl, deadline: sent.Add(ttl)}, 0, nil
	}
	wait, _ := res[1].(int64)
	return nil, time.Duration(wait) * time.Millisecond, nil
}

// abandon removes what a failed acquire may have left behind, with a fresh
// context: the caller's may be done.
func (l *Locker) abandon(k lockKeys, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = abandonScript.Run(ctx, l.client, k.all, id, k.channel).Err()
}

// TryAcquire implements [locks.Locker]. It fails with
// [locks.ErrNotObtained] while the lock is held or others queue for it.
// One round trip.
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	if err := locks.CheckArgs(key, ttl, MinTTL); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	k, id := l.keys(key), newID()
	lease, _, err := l.attempt(ctx, k, key, id, ttl, false)
	if err != nil {
		l.abandon(k, id) // the grant may have happened and its reply been lost
		return nil, fmt.Errorf("redislock: acquire %q: %w", key, err)
	}
	if lease == nil {
		return nil, locks.ErrNotObtained
	}
	return lease, nil
}

// Acquire implements [locks.Locker]. An uncontended acquire is one round
// trip. A contended one joins the key's FIFO queue and sleeps until a
// release names it on the key's channel, or until the lock's remaining TTL
// (or its queue heartbeat) is up.
func (l *Locker) Acquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	if err := locks.CheckArgs(key, ttl, MinTTL); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	k, id := l.keys(key), newID()
	// Listen before queueing, or the wake-up could come first. When other
	// local waiters already listen on the key (it is contended), that costs
	// nothing and the first attempt may queue at once; otherwise try first,
	// so an uncontended acquire is one round trip.
	listening := l.notify.Subscribed(k.channel)
	if !listening {
		lease, _, err := l.attempt(ctx, k, key, id, ttl, false)
		if err != nil {
			l.abandon(k, id)
			return nil, fmt.Errorf("redislock: acquire %q: %w", key, err)
		}
		if lease != nil {
			return lease, nil
		}
	}
	wake, err := l.notify.Register(ctx, k.channel, id)
	if errors.Is(err, rnotify.ErrClosed) {
		err = ErrClosed
	}
	if err != nil {
		return nil, fmt.Errorf("redislock: acquire %q: %w", key, err)
	}
	defer l.notify.Unregister(k.channel, id)
	timer := time.NewTimer(0)
	defer timer.Stop()
	heartbeat := l.o.WaiterTTL / 3
	for {
		lease, wait, err := l.attempt(ctx, k, key, id, ttl, true)
		if lease != nil {
			return lease, nil
		}
		if err != nil {
			l.abandon(k, id)
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return nil, fmt.Errorf("redislock: acquire %q: %w", key, err)
		}
		timer.Reset(min(max(wait, time.Millisecond), heartbeat))
		select {
		case <-wake:
		case <-timer.C:
		case <-l.notify.Done():
			l.abandon(k, id)
			return nil, ErrClosed
		case <-ctx.Done():
			l.abandon(k, id)
			return nil, fmt.Errorf("redislock: acquire %q: %w", key, ctx.Err())
		}
	}
}

// Heal raises key's token counter to at least to, so the next grant's token
// is above it. Call it with [token.StaleError.Current] when a resource
// refused a token because the counter went back (lost with a restart, and
// the server clock behind the resource's high-water). It returns the
// counter after healing. Targets above [MaxHeal] are refused with
// [locks.ErrInvalid].
func (l *Locker) Heal(ctx context.Context, key string, to token.Token) (token.Token, error) {
	if key == "" || to > MaxHeal {
		return 0, fmt.Errorf("%w: heal %q to %d (max %d)", locks.ErrInvalid, key, to, MaxHeal)
	}
	s, err := healScript.Run(ctx, l.client, l.keys(key).all[1:2], to.String(), ms(l.o.CounterIdle)).Text()
	if err != nil {
		return 0, fmt.Errorf("redislock: heal %q: %w", key, err)
	}
	return token.Parse(s)
}

// Issued returns an upper bound of every token granted for key so far: its
// counter, or the server clock in µs when that is larger. A presented token
// above it was never issued — resources use this to refuse forged tokens
// (see package httpmw). One round trip.
func (l *Locker) Issued(ctx context.Context, key string) (token.Token, error) {
	s, err := issuedScript.Run(ctx, l.client, l.keys(key).all[1:2]).Text()
	if err != nil {
		return 0, fmt.Errorf("redislock: issued %q: %w", key, err)
	}
	return token.Parse(s)
}

// Lease is a redislock grant. It implements [locks.Lease].
type Lease struct {
	l   *Locker
	k   lockKeys
	key string
	id  string // the value stored in the lock key: this grant's identity
	tok token.Token
	ttl time.Duration

	mu       sync.Mutex
	deadline time.Time // guarded by mu
	released bool      // guarded by mu
}

var _ locks.Lease = (*Lease)(nil)

// Key implements [locks.Lease].
func (s *Lease) Key() string { return s.key }

// Token implements [locks.Lease].
func (s *Lease) Token() token.Token { return s.tok }

// TTL implements [locks.Lease].
func (s *Lease) TTL() time.Duration { return s.ttl }

// Deadline implements [locks.Lease].
func (s *Lease) Deadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadline
}

// Renew implements [locks.Lease]. One round trip.
func (s *Lease) Renew(ctx context.Context) error {
	s.mu.Lock()
	released := s.released
	s.mu.Unlock()
	if released {
		return locks.NotHeldError("renew", s.key, s.tok)
	}
	sent := time.Now()
	n, err := renewScript.Run(ctx, s.l.client, s.k.all[:1], s.id, ms(s.ttl)).Int()
	if err != nil {
		return fmt.Errorf("redislock: renew %q: %w", s.key, err)
	}
	if n != 1 {
		return locks.NotHeldError("renew", s.key, s.tok)
	}
	s.mu.Lock()
	s.deadline = sent.Add(s.ttl)
	s.mu.Unlock()
	return nil
}

// Release implements [locks.Lease]. One round trip, which also wakes the
// next waiter.
func (s *Lease) Release(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released {
		return nil
	}
	n, err := releaseScript.Run(ctx, s.l.client, s.k.all, s.id, s.k.channel).Int()
	if err != nil {
		return fmt.Errorf("redislock: release %q: %w", s.key, err)
	}
	if n != 1 {
		return locks.NotHeldError("release", s.key, s.tok)
	}
	s.released = true
	return nil
}
