// Package lockstest is the behavioural suite every [locks.Locker] must pass,
// written once and run by each backend package against its real server:
//
//	func TestConformance(t *testing.T) {
//		lockstest.Run(t, lockstest.Config{
//			NewLocker: func(t *testing.T) locks.Locker { return newLockerForTest(t) },
//		})
//	}
//
// The suite checks mutual exclusion, a single winner among concurrent
// try-acquires, strictly increasing tokens, what happens to a lease that
// expired behind its holder's back, wake-up on release, prompt and clean
// cancellation, independence of keys, an acquire after the locker's
// Close failing with [locks.ErrClosed], and critical sections over
// several keys through [guard.Guard.DoAll]: no deadlock among overlapping
// sets asked for in any order, nothing left by one cut short, each key's
// own tokens. With [Config.NewSequencer] it
// checks that the backend's [token.Sequencer] answers the current grant's
// token; with [Config.Unreachable] and [Config.Blackholed], that every call
// returns by its context's deadline while the lock service is unreachable
// or answers nothing; with [Config.LockDelay], that a lease that ends
// unreleased keeps the lock from others for the delay and a release does
// not. Each subtest uses keys of its own, so lockers may share one server
// with other tests. Subtests run one after another:
// several measure latency and must not compete for the CPU.
package lockstest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/token"
)

// Config says how to run the suite against one backend.
type Config struct {
	// NewLocker returns the locker under test. It is called once per
	// subtest and may register cleanups on t. Required.
	NewLocker func(t *testing.T) locks.Locker

	// ShortTTL is the lease the expiry and renewal tests wait out: long
	// enough for a few round trips, at least the backend's minimum TTL.
	// Default 300ms.
	ShortTTL time.Duration

	// LongTTL is a lease that must not expire during a subtest, so that
	// only a release can free the lock. Default 30s.
	LongTTL time.Duration

	// Workers and Rounds shape the mutual-exclusion test: Workers
	// goroutines each take the lock Rounds times. Defaults 16 and 25.
	Workers, Rounds int

	// Grants is how many successive grants of one key the token test
	// takes. Default 200.
	Grants int

	// MultiRounds is how many critical sections over several keys the
	// multi-key deadlock test runs, from 8 goroutines. Default 1000.
	MultiRounds int

	// NewSequencer returns the backend's [token.Sequencer] for l's locks,
	// built the way a resource would build it (from a plain client, with
	// the locker's prefix). When set, the Sequencer subtest checks its
	// Current against the grants; when nil, that subtest is skipped.
	NewSequencer func(t *testing.T, l locks.Locker) token.Sequencer

	// Unreachable returns a locker on a lock service of its own, and a
	// func that makes that service unreachable for the rest of the
	// subtest (stops the server, cuts a proxy in front of it). The
	// Unreachable subtest takes a lease, queues for it, cuts the service
	// off under the waiter, and checks that the waiter, and then Acquire,
	// TryAcquire, Renew and Release, each with a
	// [DeadlineCall] deadline, return within [DeadlineSlack] of it, with
	// an error: a call must not outlast its context because of the
	// backend's own clean-up, which may go on in the background (bounded:
	// the package's goroutine-leak check runs after the tests). When nil,
	// that subtest is skipped.
	Unreachable func(t *testing.T) (l locks.Locker, cut func())

	// Blackholed is like Unreachable, but its func leaves the connections
	// open and answers nothing (a blackholing proxy, a frozen server): the
	// calls cannot fail on their own, and each must return by its
	// deadline with an error wrapping context.DeadlineExceeded. The client
	// must be one whose calls its context bounds (go-redis:
	// ContextTimeoutEnabled). When nil, that subtest is skipped.
	Blackholed func(t *testing.T) (l locks.Locker, blackhole func())

	// LockDelay returns a locker built with a lock-delay, and that delay
	// (a few ShortTTLs suit: the LockDelay subtests wait it out several
	// times). When nil, the LockDelay subtest is skipped.
	LockDelay func(t *testing.T) (l locks.Locker, delay time.Duration)
}

// Bounds the suite asserts. They are generous on purpose: the benchmarks
// report the real figures. Each is allowed, besides, the scheduler's own
// delay at that moment — how late a timer over the same stretch fired —
// so that a loaded machine does not fail a backend for its lateness.
const (
	// WakeBound is how soon after a release a blocked acquirer must hold
	// the lock.
	WakeBound = 250 * time.Millisecond
	// CancelBound is how soon after its context ends a blocked acquire
	// must return.
	CancelBound = 100 * time.Millisecond
	// DeadlineCall is the deadline of each call the Unreachable subtest
	// makes, and DeadlineSlack how late after it the call may return.
	DeadlineCall  = time.Second
	DeadlineSlack = 250 * time.Millisecond
	// RoundBound is how long one critical section of the multi-key
	// deadlock test may take, its waits for the other workers included:
	// one that deadlocked would never end.
	RoundBound = 30 * time.Second
)

func (c *Config) defaults() {
	if c.ShortTTL == 0 {
		c.ShortTTL = 300 * time.Millisecond
	}
	if c.LongTTL == 0 {
		c.LongTTL = 30 * time.Second
	}
	if c.Workers == 0 {
		c.Workers = 16
	}
	if c.Rounds == 0 {
		c.Rounds = 25
	}
	if c.Grants == 0 {
		c.Grants = 200
	}
	if c.MultiRounds == 0 {
		c.MultiRounds = 1000
	}
}

// Run runs the suite. Each behaviour is a subtest named after it, so a
// backend can run one with -run 'TestConformance/Expiry'.
func Run(t *testing.T, cfg Config) {
	t.Helper()
	if cfg.NewLocker == nil {
		t.Fatal("lockstest: Config.NewLocker is required")
	}
	cfg.defaults()
	s := &suite{cfg: cfg}
	for _, tc := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"LeaseAccessors", s.leaseAccessors},
		{"InvalidArguments", s.invalidArguments},
		{"MutualExclusion", s.mutualExclusion},
		{"OneWinnerAmongTryAcquires", s.oneWinner},
		{"TokensIncrease", s.tokensIncrease},
		{"TokensIncreaseInterleaved", s.tokensInterleaved},
		{"Expiry", s.expiry},
		{"RenewExtends", s.renewExtends},
		{"ReleaseIdempotent", s.releaseIdempotent},
		{"WakeOnRelease", s.wakeOnRelease},
		{"CancelWhileWaiting", s.cancelWhileWaiting},
		{"CancelledBeforeAcquire", s.cancelledBefore},
		{"KeysIndependent", s.keysIndependent},
		{"AcquireAfterClose", s.acquireAfterClose},
		{"MultiKeyNoDeadlock", s.multiNoDeadlock},
		{"MultiKeyPartialLeavesNothing", s.multiPartialLeavesNothing},
		{"MultiKeyTokensPerKey", s.multiTokensPerKey},
		{"Sequencer", s.sequencer},
		{"Unreachable", func(t *testing.T) { s.unreachable(t, "Unreachable", s.cfg.Unreachable, false) }},
		{"Blackholed", func(t *testing.T) { s.unreachable(t, "Blackholed", s.cfg.Blackholed, true) }},
		{"LockDelay", s.lockDelay},
	} {
		t.Run(tc.name, tc.fn)
	}
}

type suite struct{ cfg Config }

var keySeq atomic.Uint64

// key returns a key no other test uses, with the subtest's name in it so a
// leftover is easy to trace. Names contain '/': backends must take any key.
func key(t *testing.T, suffix string) string {
	return fmt.Sprintf("lockstest/%s/%d-%x/%s", t.Name(), keySeq.Add(1), rand.Uint32(), suffix)
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func (s *suite) locker(t *testing.T) locks.Locker {
	t.Helper()
	l := s.cfg.NewLocker(t)
	if l == nil {
		t.Fatal("NewLocker returned nil")
	}
	return l
}

func mustAcquire(t *testing.T, ctx context.Context, l locks.Locker, k string, ttl time.Duration) locks.Lease {
	t.Helper()
	lease, err := l.Acquire(ctx, k, ttl)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", k, err)
	}
	return lease
}

func mustRelease(t *testing.T, ctx context.Context, lease locks.Lease) {
	t.Helper()
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("Release(%q, token %d): %v", lease.Key(), lease.Token(), err)
	}
}

// assertHeld checks that k is held: a try-acquire by someone else fails.
func assertHeld(t *testing.T, ctx context.Context, l locks.Locker, k string) {
	t.Helper()
	lease, err := l.TryAcquire(ctx, k, time.Second)
	if err == nil {
		_ = lease.Release(ctx)
		t.Fatalf("%q should be held, but TryAcquire got token %d", k, lease.Token())
	}
	if !errors.Is(err, locks.ErrNotObtained) {
		t.Fatalf("TryAcquire(%q) on a held key: %v, want ErrNotObtained", k, err)
	}
}

// schedDelay starts a timer of d and returns a func that waits for it and
// says how late it fired: the scheduler's own delay over the stretch a
// check times, which the check allows on top of its bound.
func schedDelay(d time.Duration) func() time.Duration {
	due := time.Now().Add(d)
	fired := make(chan time.Time, 1)
	time.AfterFunc(d, func() { fired <- time.Now() })
	return func() time.Duration { return max(0, (<-fired).Sub(due)) }
}

func (s *suite) leaseAccessors(t *testing.T) {
	l, ctx, k := s.locker(t), ctxFor(t, time.Minute), key(t, "k")
	ttl := s.cfg.LongTTL
	before := time.Now()
	lease := mustAcquire(t, ctx, l, k, ttl)
	after := time.Now()
	defer mustRelease(t, ctx, lease)
	if lease.Key() != k {
		t.Errorf("Key() = %q, want %q", lease.Key(), k)
	}
	if lease.Token() == 0 {
		t.Error("Token() is zero: the zero token is never issued")
	}
	if lease.TTL() != ttl {
		t.Errorf("TTL() = %v, want %v", lease.TTL(), ttl)
	}
	// Conservative: no later than the acquire's end plus TTL. A backend
	// may keep up to 5% of the TTL in hand for clock drift (Redlock does).
	if d, lo := lease.Deadline(), before.Add(ttl-ttl/20); d.Before(lo) || d.After(after.Add(ttl)) {
		t.Errorf("Deadline() = %v, want within [%v, %v] (acquire window + TTL, less at most 5%% drift)", d, lo, after.Add(ttl))
	}
}

func (s *suite) invalidArguments(t *testing.T) {
	l, ctx := s.locker(t), ctxFor(t, time.Minute)
	for _, tc := range []struct {
		name string
		key  string
		ttl  time.Duration
	}{
		{"empty key", "", time.Second},
		{"zero ttl", key(t, "k"), 0},
		{"negative ttl", key(t, "k"), -time.Second},
	} {
		for op, acquire := range map[string]func(context.Context, string, time.Duration) (locks.Lease, error){
			"Acquire": l.Acquire, "TryAcquire": l.TryAcquire,
		} {
			lease, err := acquire(ctx, tc.key, tc.ttl)
			if !errors.Is(err, locks.ErrInvalidArgument) {
				t.Errorf("%s with %s: %v, want ErrInvalidArgument", op, tc.name, err)
			}
			if lease != nil {
				t.Errorf("%s with %s returned a lease", op, tc.name)
			}
		}
	}
}

// Workers increment a plain int under the lock. Lost updates or two
// holders at once show as a wrong count, an overlap, or a race report.
func (s *suite) mutualExclusion(t *testing.T) {
	l, ctx, k := s.locker(t), ctxFor(t, 5*time.Minute), key(t, "counter")
	var counter int // deliberately not atomic: the lock must protect it
	var inside atomic.Int32
	var wg sync.WaitGroup
	for range s.cfg.Workers {
		wg.Go(func() {
			for range s.cfg.Rounds {
				lease, err := l.Acquire(ctx, k, s.cfg.LongTTL)
				if err != nil {
					t.Errorf("Acquire: %v", err)
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d holders inside the critical section at once", n)
				}
				v := counter
				if rand.IntN(4) == 0 {
					time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond) // widen the window
				}
				counter = v + 1
				inside.Add(-1)
				if err := lease.Release(ctx); err != nil {
					t.Errorf("Release: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if want := s.cfg.Workers * s.cfg.Rounds; counter != want {
		t.Errorf("counter = %d, want %d: updates were lost", counter, want)
	}
}

func (s *suite) oneWinner(t *testing.T) {
	l, ctx, k := s.locker(t), ctxFor(t, time.Minute), key(t, "k")
	const n = 100
	start := make(chan struct{})
	var winners atomic.Int32
	var won atomic.Pointer[locks.Lease]
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			<-start
			lease, err := l.TryAcquire(ctx, k, s.cfg.LongTTL)
			switch {
			case err == nil:
				winners.Add(1)
				won.Store(&lease)
			case !errors.Is(err, locks.ErrNotObtained):
				t.Errorf("TryAcquire: %v, want nil or ErrNotObtained", err)
			}
		})
	}
	close(start)
	wg.Wait()
	if got := winners.Load(); got != 1 {
		t.Fatalf("%d of %d concurrent TryAcquires won, want exactly 1", got, n)
	}
	mustRelease(t, ctx, *won.Load())
}

func (s *suite) tokensIncrease(t *testing.T) {
	l, ctx, k := s.locker(t), ctxFor(t, 5*time.Minute), key(t, "k")
	var prev token.Token
	for i := range s.cfg.Grants {
		lease := mustAcquire(t, ctx, l, k, s.cfg.LongTTL)
		if tok := lease.Token(); tok <= prev {
			t.Fatalf("grant %d: token %d after %d, want strictly larger", i, tok, prev)
		}
		prev = lease.Token()
		mustRelease(t, ctx, lease)
	}
}

// Goroutines take grants of a few keys in random order. Grants of one key
// are serialised by the lock, so each key's tokens, recorded while holding
// it, must strictly increase — whatever the other keys did in between.
func (s *suite) tokensInterleaved(t *testing.T) {
	l, ctx := s.locker(t), ctxFor(t, 5*time.Minute)
	keys := []string{key(t, "a"), key(t, "b"), key(t, "c")}
	type grants struct{ toks []token.Token } // guarded by the lock under test
	seen := make(map[string]*grants, len(keys))
	for _, k := range keys {
		seen[k] = new(grants)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range s.cfg.Grants / 4 {
				k := keys[rand.IntN(len(keys))]
				lease, err := l.Acquire(ctx, k, s.cfg.LongTTL)
				if err != nil {
					t.Errorf("Acquire(%q): %v", k, err)
					return
				}
				g := seen[k]
				g.toks = append(g.toks, lease.Token())
				if err := lease.Release(ctx); err != nil {
					t.Errorf("Release: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, k := range keys {
		toks := seen[k].toks
		for i := 1; i < len(toks); i++ {
			if toks[i] <= toks[i-1] {
				t.Fatalf("%s: grant %d got token %d after %d", k, i, toks[i], toks[i-1])
			}
		}
	}
}

// A holder's lease runs out while it is not looking. The next holder must
// get a larger token, and the old lease's renew and release must fail with
// ErrNotHeld and leave the new grant alone.
func (s *suite) expiry(t *testing.T) {
	l, ctx, k := s.locker(t), ctxFor(t, time.Minute), key(t, "k")
	start := time.Now()
	old := mustAcquire(t, ctx, l, k, s.cfg.ShortTTL)

	// Blocks until the old lease expires on the server.
	next := mustAcquire(t, ctx, l, k, s.cfg.LongTTL)
	if waited := time.Since(start); waited < s.cfg.ShortTTL {
		t.Fatalf("second holder got the lock %v after the first acquired it with a %v TTL", waited, s.cfg.ShortTTL)
	}
	if next.Token() <= old.Token() {
		t.Fatalf("new holder's token %d is not above the expired holder's %d", next.Token(), old.Token())
	}
	if err := old.Renew(ctx); !errors.Is(err, locks.ErrNotHeld) {
		t.Errorf("Renew of the expired lease: %v, want ErrNotHeld", err)
	}
	if err := old.Release(ctx); !errors.Is(err, locks.ErrNotHeld) {
		t.Errorf("Release of the expired lease: %v, want ErrNotHeld", err)
	}
	assertHeld(t, ctx, l, k)
	if err := next.Renew(ctx); err != nil {
		t.Errorf("new holder's Renew after the old one's release: %v", err)
	}
	mustRelease(t, ctx, next)

	// Expired with nobody taking over: still not held.
	lone := mustAcquire(t, ctx, l, k, s.cfg.ShortTTL)
	time.Sleep(s.cfg.ShortTTL + s.cfg.ShortTTL/2)
	if err := lone.Renew(ctx); !errors.Is(err, locks.ErrNotHeld) {
		t.Errorf("Renew of a lease that expired unclaimed: %v, want ErrNotHeld", err)
	}
	after, err := l.TryAcquire(ctx, k, s.cfg.LongTTL)
	if err != nil {
		t.Fatalf("TryAcquire after expiry: %v", err)
	}
	if after.Token() <= lone.Token() {
		t.Errorf("token %d after an expired %d", after.Token(), lone.Token())
	}
	mustRelease(t, ctx, after)
}

// Renewing at a third of the TTL keeps the lock well past the first TTL.
// A renewal every third of the TTL keeps the lease, and Deadline moves.
// The machine running the check may stall a goroutine past the whole TTL
// (a loaded CI host under -race); a round in which the test itself was
// late by more than a third of the TTL proves nothing about the locker,
// so the check starts again, a few times at most.
func (s *suite) renewExtends(t *testing.T) {
	l, ctx := s.locker(t), ctxFor(t, time.Minute)
	ttl := s.cfg.ShortTTL
	const attempts = 4
	for i := range attempts {
		k := key(t, fmt.Sprintf("k%d", i))
		stalled := s.renewRounds(t, ctx, l, k, ttl)
		if stalled == "" {
			return
		}
		t.Logf("attempt %d: the test was late (%s); starting again", i+1, stalled)
	}
	t.Fatalf("the test itself was late in each of %d attempts: the machine is too loaded for a %v TTL (set Config.ShortTTL higher)", attempts, ttl)
}

// renewRounds renews a ttl lease on k nine times, a third of ttl apart,
// checking after each that k is held. It returns why a failed round is
// not the locker's fault (the test was late), or "" when every round
// passed; any other failure fails t.
func (s *suite) renewRounds(t *testing.T, ctx context.Context, l locks.Locker, k string, ttl time.Duration) string {
	t.Helper()
	lease := mustAcquire(t, ctx, l, k, ttl)
	defer func() { _ = lease.Release(ctx) }()
	first := lease.Deadline()
	last := time.Now() // when the lease was last known renewed
	late := func(at time.Time) string {
		if gap := at.Sub(last); gap > 2*ttl/3 {
			return fmt.Sprintf("%v between renewals meant to be %v apart", gap.Round(time.Millisecond), ttl/3)
		}
		return ""
	}
	for range 9 { // three TTLs in all
		time.Sleep(ttl / 3)
		start := time.Now()
		if err := lease.Renew(ctx); err != nil {
			if why := late(start); why != "" {
				return why
			}
			t.Fatalf("Renew: %v", err)
		}
		last = start
		held, err := l.TryAcquire(ctx, k, time.Second)
		if err == nil {
			_ = held.Release(ctx)
			if why := late(time.Now()); why != "" {
				return why
			}
			t.Fatalf("%q should be held after Renew, but TryAcquire got token %d", k, held.Token())
		}
		if !errors.Is(err, locks.ErrNotObtained) {
			t.Fatalf("TryAcquire(%q) on a held key: %v, want ErrNotObtained", k, err)
		}
	}
	if !lease.Deadline().After(first.Add(ttl)) {
		t.Errorf("Deadline did not move on renewal: first %v, now %v", first, lease.Deadline())
	}
	mustRelease(t, ctx, lease)
	return ""
}

func (s *suite) releaseIdempotent(t *testing.T) {
	l, ctx, k := s.locker(t), ctxFor(t, time.Minute), key(t, "k")
	lease := mustAcquire(t, ctx, l, k, s.cfg.LongTTL)
	mustRelease(t, ctx, lease)
	if err := lease.Release(ctx); err != nil {
		t.Errorf("second Release: %v, want nil", err)
	}
	if err := lease.Renew(ctx); !errors.Is(err, locks.ErrNotHeld) {
		t.Errorf("Renew after Release: %v, want ErrNotHeld", err)
	}
	// The key is free again, and a late release of the old grant must not
	// free the new one.
	next, err := l.TryAcquire(ctx, k, s.cfg.LongTTL)
	if err != nil {
		t.Fatalf("TryAcquire after Release: %v", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Errorf("third Release: %v, want nil", err)
	}
	assertHeld(t, ctx, l, k)
	mustRelease(t, ctx, next)
}

// The lock is held with a long TTL, so only the release can let the waiter
// in, and it must do so promptly.
func (s *suite) wakeOnRelease(t *testing.T) {
	l, ctx, k := s.locker(t), ctxFor(t, time.Minute), key(t, "k")
	holder := mustAcquire(t, ctx, l, k, s.cfg.LongTTL)
	type result struct {
		lease locks.Lease
		at    time.Time
		err   error
	}
	got := make(chan result, 1)
	go func() {
		lease, err := l.Acquire(ctx, k, s.cfg.LongTTL)
		got <- result{lease, time.Now(), err}
	}()
	time.Sleep(100 * time.Millisecond) // let the waiter block; nothing to observe
	select {
	case r := <-got:
		t.Fatalf("waiter got the lock while it was held: %v, %v", r.lease, r.err)
	default:
	}
	released := time.Now()
	sched := schedDelay(time.Millisecond)
	mustRelease(t, ctx, holder)
	r := <-got
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	defer mustRelease(t, ctx, r.lease)
	if d := r.at.Sub(released); d > WakeBound {
		if allowed := WakeBound + sched(); d > allowed {
			t.Errorf("waiter held the lock %v after the release, want under %v", d, allowed)
		}
	}
	if r.lease.Token() <= holder.Token() {
		t.Errorf("waiter's token %d is not above the holder's %d", r.lease.Token(), holder.Token())
	}
}

func (s *suite) cancelWhileWaiting(t *testing.T) {
	l, ctx, k := s.locker(t), ctxFor(t, time.Minute), key(t, "k")
	holder := mustAcquire(t, ctx, l, k, s.cfg.LongTTL)
	const after = 150 * time.Millisecond
	for _, tc := range []struct {
		name string
		want error
		// start returns the waiter's context, when it ends, and a cleanup.
		start func() (context.Context, func() time.Time, func())
	}{
		{"cancel", context.Canceled, func() (context.Context, func() time.Time, func()) {
			c, cancel := context.WithCancel(ctx)
			var at atomic.Pointer[time.Time]
			timer := time.AfterFunc(after, func() { now := time.Now(); at.Store(&now); cancel() })
			return c, func() time.Time { return *at.Load() }, func() { timer.Stop(); cancel() }
		}},
		{"deadline", context.DeadlineExceeded, func() (context.Context, func() time.Time, func()) {
			c, cancel := context.WithTimeout(ctx, after)
			d, _ := c.Deadline()
			return c, func() time.Time { return d }, cancel
		}},
	} {
		sched := schedDelay(after)
		wctx, ended, cleanup := tc.start()
		lease, err := l.Acquire(wctx, k, s.cfg.LongTTL)
		returned := time.Now()
		cleanup()
		if err == nil {
			_ = lease.Release(ctx)
			t.Fatalf("%s: Acquire of a held key returned a lease", tc.name)
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: Acquire returned %v, want an error wrapping %v", tc.name, err, tc.want)
		}
		if late := returned.Sub(ended()); late > CancelBound {
			if allowed := CancelBound + sched(); late > allowed {
				t.Errorf("%s: Acquire returned %v after its context ended, want under %v", tc.name, late, allowed)
			}
		}
	}
	// The abandoned waiters must not be next in line.
	mustRelease(t, ctx, holder)
	next, err := l.TryAcquire(ctx, k, s.cfg.LongTTL)
	if err != nil {
		t.Fatalf("TryAcquire after the waiters gave up: %v — a cancelled acquire left something behind", err)
	}
	mustRelease(t, ctx, next)
}

func (s *suite) cancelledBefore(t *testing.T) {
	l, k := s.locker(t), key(t, "k")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	sched := schedDelay(time.Millisecond)
	for op, acquire := range map[string]func(context.Context, string, time.Duration) (locks.Lease, error){
		"Acquire": l.Acquire, "TryAcquire": l.TryAcquire,
	} {
		lease, err := acquire(ctx, k, s.cfg.LongTTL)
		if !errors.Is(err, context.Canceled) || lease != nil {
			t.Errorf("%s with a cancelled context: %v, %v; want context.Canceled and no lease", op, lease, err)
		}
	}
	if d := time.Since(start); d > CancelBound {
		if allowed := CancelBound + sched(); d > allowed {
			t.Errorf("acquires with a cancelled context took %v, want under %v", d, allowed)
		}
	}
	lease, err := l.TryAcquire(ctxFor(t, time.Minute), k, s.cfg.LongTTL)
	if err != nil {
		t.Fatalf("TryAcquire after the cancelled attempts: %v", err)
	}
	mustRelease(t, context.Background(), lease)
}

func (s *suite) keysIndependent(t *testing.T) {
	l, ctx := s.locker(t), ctxFor(t, time.Minute)
	a, b := key(t, "a"), key(t, "b")
	la := mustAcquire(t, ctx, l, a, s.cfg.LongTTL)
	lb, err := l.TryAcquire(ctx, b, s.cfg.LongTTL)
	if err != nil {
		t.Fatalf("TryAcquire(b) while a is held: %v", err)
	}
	mustRelease(t, ctx, la)
	if err := lb.Renew(ctx); err != nil {
		t.Fatalf("Renew(b) after releasing a: %v", err)
	}
	assertHeld(t, ctx, l, b)
	mustRelease(t, ctx, lb)
}

// A locker with a Close method fails an acquire after Close with an error
// matching [locks.ErrClosed], at once, rather than leaving it to wait out
// its context. The key is held, so the acquire cannot succeed on a fast
// path that never looks at the locker's state.
func (s *suite) acquireAfterClose(t *testing.T) {
	l := s.locker(t)
	c, ok := l.(interface{ Close() error })
	if !ok {
		t.Skip("the locker has no Close method")
	}
	ctx, k := ctxFor(t, time.Minute), key(t, "k")
	lease := mustAcquire(t, ctx, l, k, s.cfg.LongTTL)
	// Closing may end the locker's leases (a ZooKeeper session's do): the
	// release is best effort.
	defer func() { _ = lease.Release(ctx) }()
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	actx, cancel := context.WithTimeout(ctx, DeadlineCall)
	defer cancel()
	start := time.Now()
	got, err := l.Acquire(actx, k, s.cfg.LongTTL)
	if got != nil {
		_ = got.Release(ctx)
	}
	if !errors.Is(err, locks.ErrClosed) {
		t.Fatalf("Acquire after Close: %v (after %v), want an error matching locks.ErrClosed", err, time.Since(start))
	}
	// A free key too: a closed locker grants nothing.
	free := key(t, "free")
	for name, acquire := range map[string]func(context.Context, string, time.Duration) (locks.Lease, error){
		"Acquire": l.Acquire, "TryAcquire": l.TryAcquire,
	} {
		got, err := acquire(actx, free, s.cfg.LongTTL)
		if got != nil {
			_ = got.Release(ctx)
		}
		if !errors.Is(err, locks.ErrClosed) {
			t.Errorf("%s of a free key after Close: %v, want an error matching locks.ErrClosed", name, err)
		}
	}
}

// The sequencer answers the token of the current grant: the holder's
// while the key is held — not a waiter's, not another key's — and, while
// it is free, at least the last grant's and below the next one's. Its
// answers never decrease.
func (s *suite) sequencer(t *testing.T) {
	if s.cfg.NewSequencer == nil {
		t.Skip("lockstest: Config.NewSequencer not set")
	}
	l, ctx, k := s.locker(t), ctxFor(t, time.Minute), key(t, "k")
	seq := s.cfg.NewSequencer(t, l)
	var last token.Token
	current := func(step string) token.Token {
		t.Helper()
		cur, err := seq.Current(ctx, k)
		if err != nil {
			t.Fatalf("%s: Current: %v", step, err)
		}
		if cur < last {
			t.Fatalf("%s: Current %d after %d: answers decreased", step, cur, last)
		}
		last = cur
		return cur
	}
	current("before any grant")

	holder := mustAcquire(t, ctx, l, k, s.cfg.LongTTL)
	if cur := current("held"); cur != holder.Token() {
		t.Fatalf("held: Current %d, want the holder's %d", cur, holder.Token())
	}
	type result struct {
		lease locks.Lease
		err   error
	}
	got := make(chan result, 1)
	wctx, cancel := context.WithCancel(ctx)
	go func() {
		lease, err := l.Acquire(wctx, k, s.cfg.LongTTL)
		got <- result{lease, err}
	}()
	waited := false
	t.Cleanup(func() { // on a failure before the hand-over too
		cancel()
		if !waited {
			if r := <-got; r.err == nil {
				_ = r.lease.Release(context.Background())
			}
		}
		_ = holder.Release(context.Background())
	})
	time.Sleep(100 * time.Millisecond) // let the waiter queue; true either way
	other := mustAcquire(t, ctx, l, key(t, "other"), s.cfg.LongTTL)
	if cur := current("held, a waiter queued, another key granted"); cur != holder.Token() {
		t.Fatalf("held with a waiter queued and another key granted (%d): Current %d, want the holder's %d", other.Token(), cur, holder.Token())
	}
	mustRelease(t, ctx, other)

	mustRelease(t, ctx, holder)
	r := <-got
	waited = true
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	waiter := r.lease
	if cur := current("handed over"); cur != waiter.Token() {
		t.Fatalf("handed over: Current %d, want the new holder's %d", cur, waiter.Token())
	}
	mustRelease(t, ctx, waiter)
	free := current("free")
	if free < waiter.Token() {
		t.Fatalf("free: Current %d, below the last grant's %d", free, waiter.Token())
	}
	next := mustAcquire(t, ctx, l, k, s.cfg.LongTTL)
	defer mustRelease(t, ctx, next)
	if next.Token() <= free {
		t.Fatalf("free: Current %d, not below the next grant's %d", free, next.Token())
	}
	if cur := current("granted again"); cur != next.Token() {
		t.Fatalf("granted again: Current %d, want %d", cur, next.Token())
	}
}

// With the lock service unreachable, every call returns by its context's
// deadline (plus DeadlineSlack), with an error. One that returns at the
// deadline says so (it wraps context.DeadlineExceeded); one that returns
// before it failed on its own, and its error is the transport's, not "not
// obtained". With the service blackholed (silent) no call may fail before
// its deadline: each returns at it, with the context's error.
func (s *suite) unreachable(t *testing.T, field string, setup func(*testing.T) (locks.Locker, func()), silent bool) {
	if setup == nil {
		t.Skipf("lockstest: Config.%s not set", field)
	}
	l, cut := setup(t)
	if l == nil || cut == nil {
		t.Fatalf("Config.%s returned a nil locker or fault func", field)
	}
	fault := "unreachable"
	if silent {
		fault = "blackholed"
	}
	ctx := ctxFor(t, time.Minute)
	k := key(t, "k")
	lease := mustAcquire(t, ctx, l, k, s.cfg.LongTTL)
	// before runs as the call starts: the first call queues for the held
	// key while the service is up, and the service goes away under it.
	before := func() {
		time.Sleep(DeadlineCall / 4)
		cut()
	}
	check := func(op string, call func(context.Context) error, notObtainedOK bool) {
		t.Helper()
		cctx, cancel := context.WithTimeout(context.Background(), DeadlineCall)
		defer cancel()
		deadline, _ := cctx.Deadline()
		start := time.Now()
		sched := schedDelay(time.Until(deadline))
		var wg sync.WaitGroup
		if before != nil {
			wg.Go(before)
			before = nil
		}
		err := call(cctx)
		wg.Wait()
		returned := time.Now()
		took, late := returned.Sub(start), returned.Sub(deadline)
		t.Logf("%s with the service %s: returned after %v (%+v past the deadline): %v", op, fault, took.Round(time.Millisecond), late.Round(time.Millisecond), err)
		switch {
		case err == nil:
			t.Errorf("%s succeeded with the lock service unreachable", op)
		case late > DeadlineSlack && late > DeadlineSlack+sched():
			t.Errorf("%s returned %v after its context's deadline, want under %v and the scheduler's delay: %v", op, late, DeadlineSlack, err)
		case !notObtainedOK && errors.Is(err, locks.ErrNotObtained):
			t.Errorf("%s: %v; an unreachable service is not a held lock", op, err)
		case late >= 0 && !errors.Is(err, context.DeadlineExceeded):
			t.Errorf("%s returned at the deadline with %v, want an error wrapping context.DeadlineExceeded", op, err)
		case silent && !errors.Is(err, context.DeadlineExceeded):
			t.Errorf("%s returned %v before its deadline with %v from a service that answers nothing", op, -late, err)
		}
	}
	check("Acquire of the held key, queued before the cut", func(ctx context.Context) error {
		l2, err := l.Acquire(ctx, k, s.cfg.LongTTL)
		if err == nil {
			_ = l2.Release(context.Background())
		}
		return err
	}, true)
	check("Acquire", func(ctx context.Context) error {
		l2, err := l.Acquire(ctx, key(t, "other"), s.cfg.LongTTL)
		if err == nil {
			_ = l2.Release(context.Background())
		}
		return err
	}, false)
	check("TryAcquire", func(ctx context.Context) error {
		l2, err := l.TryAcquire(ctx, key(t, "other"), s.cfg.LongTTL)
		if err == nil {
			_ = l2.Release(context.Background())
		}
		return err
	}, false)
	check("Acquire of the held key", func(ctx context.Context) error {
		l2, err := l.Acquire(ctx, k, s.cfg.LongTTL)
		if err == nil {
			_ = l2.Release(context.Background())
		}
		return err
	}, true)
	check("Renew", lease.Renew, false)
	check("Release", lease.Release, false)
}

// CutShort calls each of calls rounds times, each with a context whose
// deadline is d away, against a service that answers nothing (paused,
// blackholed), and fails t unless every call returns within
// [DeadlineSlack] of its deadline (and the scheduler's own delay, as for
// every bound of the suite) with an error matching
// context.DeadlineExceeded. Many rounds of short deadlines test the race
// between a client's socket deadline and the context's own timer.
func CutShort(t *testing.T, ctx context.Context, calls map[string]func(context.Context) error, rounds int, d time.Duration) {
	t.Helper()
	for round := range rounds {
		for name, call := range calls {
			cctx, cancel := context.WithTimeout(ctx, d)
			start := time.Now()
			sched := schedDelay(d)
			err := call(cctx)
			cancel()
			if late := time.Since(start) - d; late > DeadlineSlack && late > DeadlineSlack+sched() {
				t.Errorf("round %d, %s returned %v past its deadline", round, name, late)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("round %d, %s against a silent service: %v, want an error matching context.DeadlineExceeded", round, name, err)
			}
		}
	}
}
