package memlock

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/token"
)

// MinTTL is the shortest TTL memlock accepts.
const MinTTL = time.Millisecond

// Locker is an in-process [locks.Locker]. The zero value is ready to use; a
// Locker must not be copied after first use.
type Locker struct {
	mu   sync.Mutex
	keys map[string]*entry // guarded by mu; present while held or waited for
	last token.Token       // guarded by mu; the last token issued
}

// entry is one key's state.
type entry struct {
	holder  *Lease    // nil while the lock is being handed over
	expires time.Time // holder's expiry, on the monotonic clock
	queue   []*waiter // FIFO
}

type waiter struct {
	ttl     time.Duration
	granted chan *Lease // buffered: the hand-over never blocks
}

var _ locks.Locker = (*Locker)(nil)

// New returns an empty Locker. It is equivalent to new(Locker).
func New() *Locker { return new(Locker) }

// TryAcquire implements [locks.Locker]. It fails with [locks.ErrNotObtained]
// while the lock is held or others wait for it.
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	if err := locks.CheckArgs(key, ttl, MinTTL); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entryLocked(key, time.Now())
	if e.holder != nil || len(e.queue) > 0 {
		return nil, locks.ErrNotObtained
	}
	return l.grantLocked(key, e, ttl), nil
}

// Acquire implements [locks.Locker].
func (l *Locker) Acquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	if err := locks.CheckArgs(key, ttl, MinTTL); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	e := l.entryLocked(key, time.Now())
	if e.holder == nil && len(e.queue) == 0 {
		lease := l.grantLocked(key, e, ttl)
		l.mu.Unlock()
		return lease, nil
	}
	w := &waiter{ttl: ttl, granted: make(chan *Lease, 1)}
	e.queue = append(e.queue, w)
	l.mu.Unlock()

	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		// Wake when the holder's lease would expire, to take over from it.
		l.mu.Lock()
		wait := time.Until(e.expires)
		l.mu.Unlock()
		timer.Reset(max(wait, 0))
		select {
		case lease := <-w.granted:
			return lease, nil
		case <-timer.C:
			l.mu.Lock()
			l.expireLocked(key, e, time.Now())
			l.mu.Unlock()
		case <-ctx.Done():
			l.abandon(key, e, w)
			return nil, ctx.Err()
		}
	}
}

// abandon removes a cancelled waiter, or releases what it was granted while
// it was giving up.
func (l *Locker) abandon(key string, e *entry, w *waiter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case lease := <-w.granted:
		l.handOverLocked(key, e, lease)
	default:
		e.queue = slices.DeleteFunc(e.queue, func(q *waiter) bool { return q == w })
		l.dropIfIdleLocked(key, e)
	}
}

// Len returns the number of keys held or waited for.
func (l *Locker) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}

// Issued returns an upper bound of every token the Locker has issued for
// key: the last token it issued for any key, since one counter feeds them
// all. It never fails and ignores ctx. Its type is that of httpmw's
// Options.Issued, the forged-token check.
func (l *Locker) Issued(_ context.Context, _ string) (token.Token, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last, nil
}

// Break frees key at once, whoever holds it, as an operator deleting a lock
// by hand would. The holder's next Renew or Release fails with
// [locks.ErrNotHeld]. It reports whether the key was held.
func (l *Locker) Break(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.keys[key]
	if e == nil || e.holder == nil {
		return false
	}
	l.handOverLocked(key, e, e.holder)
	return true
}

// entryLocked returns key's entry, creating it, and first expires a holder
// whose lease has run out.
func (l *Locker) entryLocked(key string, now time.Time) *entry {
	e := l.keys[key]
	if e == nil {
		if l.keys == nil {
			l.keys = make(map[string]*entry)
		}
		e = &entry{}
		l.keys[key] = e
	}
	l.expireLocked(key, e, now)
	return e
}

func (l *Locker) expireLocked(key string, e *entry, now time.Time) {
	if e.holder != nil && !now.Before(e.expires) {
		l.handOverLocked(key, e, e.holder)
	}
}

// handOverLocked ends from's grant and passes the lock to the first waiter,
// or deletes the entry when nobody waits.
func (l *Locker) handOverLocked(key string, e *entry, from *Lease) {
	if e.holder == from {
		e.holder = nil
	}
	if len(e.queue) > 0 {
		w := e.queue[0]
		e.queue = e.queue[1:]
		w.granted <- l.grantLocked(key, e, w.ttl)
		return
	}
	l.dropIfIdleLocked(key, e)
}

func (l *Locker) dropIfIdleLocked(key string, e *entry) {
	if e.holder == nil && len(e.queue) == 0 && l.keys[key] == e {
		delete(l.keys, key)
	}
}

func (l *Locker) grantLocked(key string, e *entry, ttl time.Duration) *Lease {
	now := time.Now()
	l.last = max(l.last+1, token.Token(now.UnixMicro()))
	lease := &Lease{l: l, key: key, tok: l.last, ttl: ttl, e: e}
	e.holder = lease
	e.expires = now.Add(ttl)
	lease.deadline = e.expires
	return lease
}

// Lease is a memlock grant. It implements [locks.Lease].
type Lease struct {
	l   *Locker
	key string
	tok token.Token
	ttl time.Duration
	e   *entry // the entry this grant was made in

	// guarded by l.mu
	deadline time.Time
	released bool
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
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	return s.deadline
}

// heldLocked reports whether this grant still holds its key, expiring the
// holder first if its lease ran out.
func (s *Lease) heldLocked(now time.Time) bool {
	if s.l.keys[s.key] != s.e {
		return false
	}
	s.l.expireLocked(s.key, s.e, now)
	return s.e.holder == s
}

// Renew implements [locks.Lease].
func (s *Lease) Renew(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	now := time.Now()
	if s.released || !s.heldLocked(now) {
		return locks.NotHeldError("renew", s.key, s.tok)
	}
	s.e.expires = now.Add(s.ttl)
	s.deadline = s.e.expires
	return nil
}

// Release implements [locks.Lease].
func (s *Lease) Release(context.Context) error {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	if s.released {
		return nil
	}
	if !s.heldLocked(time.Now()) {
		return locks.NotHeldError("release", s.key, s.tok)
	}
	s.released = true
	s.l.handOverLocked(s.key, s.e, s)
	return nil
}
