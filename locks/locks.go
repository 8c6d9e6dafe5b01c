package locks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fenceguard/fenceguard/token"
)

// Locker grants leases on keys. Implementations are safe for concurrent use.
type Locker interface {
	// Acquire blocks until the lock on key is granted for ttl, or ctx ends.
	// A waiting Acquire wakes when the holder releases or its lease expires,
	// not by polling at a fixed rate. When ctx ends first it returns an
	// error wrapping ctx.Err() and leaves nothing behind: no grant, no
	// waiting entry that would hold up later acquirers.
	Acquire(ctx context.Context, key string, ttl time.Duration) (Lease, error)

	// TryAcquire makes one attempt. When the lock is held it returns
	// ErrNotObtained at once.
	TryAcquire(ctx context.Context, key string, ttl time.Duration) (Lease, error)
}

// Lease is one grant of a lock.
type Lease interface {
	// Key is the lock's key.
	Key() string

	// Token is the grant's fencing token: never zero, larger than the token
	// of every earlier grant of Key.
	Token() token.Token

	// TTL is the lease duration the lock was granted (and is renewed) for.
	TTL() time.Duration

	// Deadline is when the lease ends unless renewed, measured
	// conservatively on the local clock: from before the request that
	// granted or last renewed it was sent, so the server's own expiry is no
	// earlier (clock drift aside). Past the deadline the lock may belong to
	// someone else.
	Deadline() time.Time

	// Renew extends the lease by TTL from now, only if this grant still
	// holds the lock. It returns an error wrapping ErrNotHeld when it does
	// not.
	Renew(ctx context.Context) error

	// Release gives the lock up, only if this grant still holds it, and
	// wakes the next waiter. It is idempotent: after a successful release,
	// further calls return nil. When the grant was no longer held it
	// returns an error wrapping ErrNotHeld and changes nothing on the
	// server.
	Release(ctx context.Context) error
}

// MultiTryAcquirer is implemented by lockers that can try several keys in
// one round trip, all or none (a Redis script over keys one node serves,
// an etcd transaction). Package guard's AcquireAll and TryAcquireAll try
// it first, and take the keys one by one when it fails.
type MultiTryAcquirer interface {
	// TryAcquireAll makes one attempt at every key of keys — distinct,
	// non-empty and sorted — for ttl. It grants them all, each a Lease of
	// its own with its own token, returned in the order of keys, or none:
	// when any key is held it returns an error wrapping ErrNotObtained
	// that names it. A locker that cannot take these keys together (keys
	// of several Redis Cluster slots) returns an error wrapping
	// ErrInvalidArgument and takes none.
	TryAcquireAll(ctx context.Context, keys []string, ttl time.Duration) ([]Lease, error)
}

// LossNotifier is implemented by leases whose backend learns of a loss on
// its own — a ZooKeeper session disconnecting or expiring, say — sooner than
// the holder's next renewal would. The channel is closed once the grant is
// known lost (or can no longer be known held); Renew then fails with
// ErrNotHeld. Package guard cancels the lease context at once when it
// closes.
type LossNotifier interface {
	Lost() <-chan struct{}
}

// MinTTLer is implemented by lockers that refuse leases shorter than a
// minimum (the backend's resolution or its server's floor): Acquire and
// TryAcquire with a smaller TTL fail with [ErrInvalidArgument]. Package guard asks
// for it so that a Guard whose TTL is too short fails at construction, not
// at its first acquire. A locker that wraps another (tracing, metrics)
// should pass the inner locker's minimum on.
type MinTTLer interface {
	MinTTL() time.Duration
}

// MinTTL returns l's minimum TTL when it implements [MinTTLer], and 0 (no
// minimum known) when it does not.
func MinTTL(l Locker) time.Duration {
	if m, ok := l.(MinTTLer); ok {
		return m.MinTTL()
	}
	return 0
}

// LeaseAs returns the first lease in l's chain of Unwrap calls (l itself
// first; a lease that wraps another, as package guard's and a tracing
// wrapper's do, has a method Unwrap() Lease) of type T, say *etcdlock.Lease, to reach what only the backend
// offers:
//
//	if el, ok := locks.LeaseAs[*etcdlock.Lease](gl.Unwrap()); ok {
//		txn.If(el.IsOwner())
//	}
func LeaseAs[T any](l Lease) (T, bool) {
	for l != nil {
		if t, ok := l.(T); ok {
			return t, true
		}
		u, ok := l.(interface{ Unwrap() Lease })
		if !ok {
			break
		}
		l = u.Unwrap()
	}
	var zero T
	return zero, false
}

// Sentinel errors, tested with [errors.Is]. Every backend's errors match
// them.
var (
	// ErrNotObtained: TryAcquire found the lock held by another.
	ErrNotObtained = errors.New("lock not obtained: held by another")
	// ErrNotHeld: the grant is no longer held (expired, taken over, deleted).
	ErrNotHeld = errors.New("lock not held: the lease expired or was taken over")
	// ErrInvalidArgument: a bad key, TTL or option at call time; nothing
	// was sent to the server.
	ErrInvalidArgument = errors.New("invalid lock argument")
	// ErrClosed: the locker was used after its Close.
	ErrClosed = errors.New("locker closed")
)

// CheckArgs validates the arguments of an acquire: a non-empty key and a
// TTL of at least minTTL. Backends call it before touching the server and
// pass their own minimum (the backend's resolution).
func CheckArgs(key string, ttl, minTTL time.Duration) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidArgument)
	}
	if ttl < minTTL {
		return fmt.Errorf("%w: ttl %v is below the minimum %v", ErrInvalidArgument, ttl, minTTL)
	}
	return nil
}

// MaxLockDelay is the longest lock-delay a locker accepts. A longer one
// would keep a key unusable for over an hour after every holder that
// vanished: more likely a unit mistake than a choice.
const MaxLockDelay = time.Hour

// CheckLockDelay validates a locker's lock-delay option (see "Lock-delay"
// in the package doc): 0 (no delay) up to [MaxLockDelay]. Lockers call it
// when they are built.
func CheckLockDelay(d time.Duration) error {
	if d < 0 || d > MaxLockDelay {
		return fmt.Errorf("%w: lock-delay %v is outside [0, %v]", ErrInvalidArgument, d, MaxLockDelay)
	}
	return nil
}

// NotHeldError returns an error wrapping ErrNotHeld that names the lease,
// for backends' Renew and Release.
func NotHeldError(op, key string, t token.Token) error {
	return fmt.Errorf("%s %q (token %d): %w", op, key, t, ErrNotHeld)
}
