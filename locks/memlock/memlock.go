package memlock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/token"
)

// MinTTL is the shortest TTL memlock accepts.
const MinTTL = time.Millisecond

// maxToken is the ceiling of memlock's counter: the Locker refuses to grant
// past it rather than wrap around to a token below earlier ones. It is
// [token.MaxInt64], as for every fenceguard locker, so every token fits a
// signed 64-bit column (PostgreSQL's bigint). The clock floor alone stays
// below it for the next 290,000 years.
const maxToken = token.MaxInt64

// Locker is an in-process [locks.Locker]. The zero value is ready to use; a
// Locker must not be copied after first use.
type Locker struct {
	delay time.Duration // the lock-delay; see NewWithOptions

	mu   sync.Mutex
	keys map[string]*entry // guarded by mu; present while held or waited for
	last token.Token       // guarded by mu; the last token issued

	// Set by tests only (export_test.go), before first use.
	clock func() time.Time                     // nil: time.Now
	hook  func(ctx context.Context, at string) // nil: none; see waitHook, grantHook
}

// The points of Acquire's wait at which a test hook runs: before each
// wait, and after a grant was taken from the channel (before it is
// checked), where a goroutine that is not scheduled in time would be.
const (
	waitHook  = "wait"
	grantHook = "granted"
)

func (l *Locker) now() time.Time {
	if l.clock != nil {
		return l.clock()
	}
	return time.Now()
}

func (l *Locker) runHook(ctx context.Context, at string) {
	if l.hook != nil {
		l.hook(ctx, at)
	}
}

// entry is one key's state.
type entry struct {
	holder  *Lease    // nil while the lock is being handed over
	expires time.Time // holder's expiry, lock-delay included, on the monotonic clock
	queue   []*waiter // FIFO
	// regrant is closed when the lock is granted again, so that waiters
	// timing the holder's expiry time the new holder's; made by the first
	// waiter that needs it.
	regrant chan struct{}
}

type waiter struct {
	ttl     time.Duration
	granted chan grant // buffered: the hand-over never blocks
}

// grant is what a hand-over sends a waiter: a lease, or why there is none.
type grant struct {
	lease *Lease
	err   error
}

var _ locks.Locker = (*Locker)(nil)

var _ locks.MinTTLer = (*Locker)(nil)

// MinTTL implements [locks.MinTTLer]: [MinTTL].
func (l *Locker) MinTTL() time.Duration { return MinTTL }

// New returns an empty Locker. It is equivalent to new(Locker).
func New() *Locker { return new(Locker) }

// Options configure a Locker built by [NewWithOptions]. The zero value is
// what [New] builds.
type Options struct {
	// LockDelay keeps a key from every other acquirer for this long past
	// the Deadline of a lease that ended without a Release (it expired);
	// a Release hands the lock over at once. [Locker.Break] and
	// [Locker.TakeOver] ignore it. 0, the default: no delay. At most
	// [locks.MaxLockDelay]. See "Lock-delay" in the package doc.
	LockDelay time.Duration
}

// NewWithOptions returns an empty Locker configured by o. It fails with an
// error wrapping [locks.ErrInvalidArgument] when an option is out of range.
func NewWithOptions(o Options) (*Locker, error) {
	if err := locks.CheckLockDelay(o.LockDelay); err != nil {
		return nil, fmt.Errorf("memlock: %w", err)
	}
	return &Locker{delay: o.LockDelay}, nil
}

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
	e := l.entryLocked(key, l.now())
	if e.holder != nil || len(e.queue) > 0 {
		return nil, locks.ErrNotObtained
	}
	return l.grantFreeLocked(key, e, ttl)
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
	e := l.entryLocked(key, l.now())
	if e.holder == nil && len(e.queue) == 0 {
		lease, err := l.grantFreeLocked(key, e, ttl)
		l.mu.Unlock()
		return lease, err
	}
	w := &waiter{ttl: ttl, granted: make(chan grant, 1)}
	e.queue = append(e.queue, w)
	l.mu.Unlock()

	timer := time.NewTimer(0)
	defer timer.Stop()
	retimed := false // the wait goes on, timed for a new holder
	for {
		// Wake when the holder's lease would expire, to take over from it,
		// and time it again when someone else is granted the lock.
		l.mu.Lock()
		wait := e.expires.Sub(l.now())
		if e.regrant == nil {
			e.regrant = make(chan struct{})
		}
		regrant := e.regrant
		l.mu.Unlock()
		timer.Reset(max(wait, 0))
		if !retimed {
			l.runHook(ctx, waitHook)
		}
		retimed = false
		select {
		case g := <-w.granted:
			l.runHook(ctx, grantHook)
			if g.err != nil {
				return nil, g.err
			}
			l.mu.Lock()
			if g.lease.heldLocked(l.now()) {
				l.mu.Unlock()
				return g.lease, nil
			}
			// The grant ran out (or was broken) before this goroutine took
			// it — it was not scheduled in time — and heldLocked has passed
			// the lock on. Returning it would hand the caller a lock someone
			// else may hold: wait again, as a new arrival.
			e = l.entryLocked(key, l.now())
			if e.holder == nil && len(e.queue) == 0 {
				lease, err := l.grantFreeLocked(key, e, ttl)
				l.mu.Unlock()
				return lease, err
			}
			e.queue = append(e.queue, w)
			l.mu.Unlock()
		case <-timer.C:
			l.mu.Lock()
			l.expireLocked(key, e, l.now())
			l.mu.Unlock()
		case <-regrant:
			retimed = true
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
	case g := <-w.granted:
		// Release the grant only if it still holds the lock: a grant that
		// ran out before this waiter took it has been passed on already,
		// and handing over again would make two holders.
		if g.err == nil && g.lease.heldLocked(l.now()) {
			g.lease.released = true
			l.handOverLocked(key, g.lease.e, g.lease)
		}
	default:
		e.queue = slices.DeleteFunc(e.queue, func(q *waiter) bool { return q == w })
		l.dropIfIdleLocked(key, e)
	}
}

// Issued returns an upper bound of every token the Locker has issued for
// key: exactly the last token it issued for any key, since one counter
// feeds them all. It never fails and ignores ctx. It is no bound for a
// forged-token check: another key's grant raises it above the token of
// key's holder, and a client presenting it would claim above the holder.
// The check wants [Locker.Current].
func (l *Locker) Issued(_ context.Context, _ string) (token.Token, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last, nil
}

var _ token.Sequencer = (*Locker)(nil)

// Current implements [token.Sequencer], for [token.SequencerCheck]: the
// token of key's current holder while the lock is held, and otherwise the
// last token issued for any key — at least the token of key's last grant,
// and below every later one, since one counter feeds every key. Waiters
// have no token until they are handed the lock, so Current is never above
// the holder's token. A holder whose lease ran out without a release still
// counts until the Locker notices the expiry (see [Lease.Lost]); its token
// is below every later grant's. It never fails and ignores ctx.
func (l *Locker) Current(_ context.Context, key string) (token.Token, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.keys[key]; e != nil && e.holder != nil {
		return e.holder.tok, nil
	}
	return l.last, nil
}

// Break frees key at once, whoever holds it, as an operator deleting a lock
// by hand would, and hands it to the first waiter. The holder's
// [Lease.Lost] channel is closed before Break returns, so a guard over the
// Locker cancels the holder's lease context without waiting for a renewal;
// its next Renew or Release fails with [locks.ErrNotHeld]. It reports
// whether the key was held.
//
// In a test, Break is the lease lost in the middle of the critical section
// (see the package doc, "Testing").
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

// TakeOver grants key to a new lease at once, ahead of any waiter, as the
// lock service does when the holder's lease ran out while the holder was
// paused and the next one acquired: the previous holder is told nothing
// (its [Lease.Lost] stays open) until its next Renew or Release, which
// fail with [locks.ErrNotHeld]. The new lease's token is above every
// earlier one. It fails as [Locker.TryAcquire] does for a bad key or TTL,
// or when the counter is at its ceiling.
//
// In a test, TakeOver is the next holder getting in while the code under
// test still believes it holds the lock: claim a fence with the new
// lease's token, and the old holder's next claim is refused as stale (see
// the package doc, "Testing").
func (l *Locker) TakeOver(key string, ttl time.Duration) (*Lease, error) {
	if err := locks.CheckArgs(key, ttl, MinTTL); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entryLocked(key, l.now())
	lease, err := l.grantLocked(key, e, ttl)
	if err != nil {
		l.dropIfIdleLocked(key, e)
		return nil, err
	}
	return lease, nil
}

// entryLocked returns key's entry, creating it, and first expires a holder
// whose lease has run out. Creating an entry first sweeps others.
func (l *Locker) entryLocked(key string, now time.Time) *entry {
	if e := l.keys[key]; e != nil {
		l.expireLocked(key, e, now)
		if l.keys[key] == e {
			return e
		}
		// The expiry left it idle and dropped it from the map: a grant
		// made in it would not be found by the next acquire.
	}
	if l.keys == nil {
		l.keys = make(map[string]*entry)
	}
	l.sweepLocked(now)
	e := &entry{}
	l.keys[key] = e
	return e
}

// sweepPerEntry is how many entries each new entry sweeps.
const sweepPerEntry = 2

// sweepLocked expires the holders of a few entries, those Go's map
// iteration starts with (a random place), so that keys whose leases ran
// out unreleased and that nobody uses again do not stay for good. Each new
// entry removes two expired ones in proportion to their share of the map,
// so expired entries stay at most about as many as the unexpired ones.
func (l *Locker) sweepLocked(now time.Time) {
	n := 0
	for key, e := range l.keys {
		l.expireLocked(key, e, now)
		if n++; n == sweepPerEntry {
			return
		}
	}
}

func (l *Locker) expireLocked(key string, e *entry, now time.Time) {
	if e.holder != nil && !now.Before(e.expires) {
		l.handOverLocked(key, e, e.holder)
	}
}

// handOverLocked ends from's grant and passes the lock to the first waiter,
// or deletes the entry when nobody waits. When the counter is exhausted,
// every waiter is told so: none of them can be granted.
func (l *Locker) handOverLocked(key string, e *entry, from *Lease) {
	if e.holder == from {
		e.holder = nil
		if !from.released {
			close(from.lost) // expired or broken: the holder did not let go
		}
	}
	if e.holder != nil {
		return // from had lost the lock already; the holder stays
	}
	for len(e.queue) > 0 {
		w := e.queue[0]
		e.queue = e.queue[1:]
		lease, err := l.grantLocked(key, e, w.ttl)
		w.granted <- grant{lease, err}
		if err == nil {
			return
		}
	}
	l.dropIfIdleLocked(key, e)
}

func (l *Locker) dropIfIdleLocked(key string, e *entry) {
	if e.holder == nil && len(e.queue) == 0 && l.keys[key] == e {
		delete(l.keys, key)
	}
}

// grantFreeLocked grants the free, unqueued key e to the caller, or leaves
// nothing behind if it cannot.
func (l *Locker) grantFreeLocked(key string, e *entry, ttl time.Duration) (locks.Lease, error) {
	lease, err := l.grantLocked(key, e, ttl)
	if err != nil {
		l.dropIfIdleLocked(key, e)
		return nil, err
	}
	return lease, nil
}

// grantLocked makes the next token and gives e to a new lease. Past
// [token.MaxInt64] it refuses with an error wrapping a [*token.RangeError] and
// changes nothing.
func (l *Locker) grantLocked(key string, e *entry, ttl time.Duration) (*Lease, error) {
	if l.last >= maxToken {
		next := l.last
		if next < 1<<64-1 {
			next++
		}
		return nil, fmt.Errorf("memlock: grant of %q: %w", key,
			&token.RangeError{What: "memlock counter", Token: next, Max: maxToken})
	}
	now := l.now()
	// A clock before 1970 floors nothing (and must not turn into a huge
	// unsigned token).
	floor := token.Token(max(now.UnixMicro(), 0))
	l.last = max(l.last+1, floor)
	lease := &Lease{l: l, key: key, tok: l.last, ttl: ttl, e: e, lost: make(chan struct{})}
	e.holder = lease
	lease.deadline = now.Add(ttl)
	e.expires = lease.deadline.Add(l.delay)
	if e.regrant != nil {
		close(e.regrant)
		e.regrant = nil
	}
	return lease, nil
}

// Lease is a memlock grant. It implements [locks.Lease].
type Lease struct {
	l   *Locker
	key string
	tok token.Token
	ttl time.Duration
	e   *entry // the entry this grant was made in

	lost chan struct{} // closed under l.mu when the grant ends without a Release

	// guarded by l.mu
	deadline time.Time
	released bool
}

var (
	_ locks.Lease        = (*Lease)(nil)
	_ locks.LossNotifier = (*Lease)(nil)
)

// Lost implements [locks.LossNotifier]: the channel is closed when the
// grant ends other than by its own Release — [Locker.Break], or its expiry
// (the lock-delay past its Deadline, if any) once the Locker notices it
// (another acquire of the key, a Renew or a Release of this grant, or a
// sweep when another key's entry is created: see "Memory" in the package
// doc).
func (s *Lease) Lost() <-chan struct{} { return s.lost }

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
	now := s.l.now()
	if s.released || !s.heldLocked(now) {
		return locks.NotHeldError("renew", s.key, s.tok)
	}
	s.deadline = now.Add(s.ttl)
	s.e.expires = s.deadline.Add(s.l.delay)
	return nil
}

// Release implements [locks.Lease].
func (s *Lease) Release(context.Context) error {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	if s.released {
		return nil
	}
	if !s.heldLocked(s.l.now()) {
		return locks.NotHeldError("release", s.key, s.tok)
	}
	s.released = true
	s.l.handOverLocked(s.key, s.e, s)
	return nil
}
