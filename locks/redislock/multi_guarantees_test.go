package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/token"
)

// exclusionLog checks, for each key, that no two grants hold it at once
// and that each grant's token is above every earlier grant's of that key.
type exclusionLog struct {
	mu     sync.Mutex
	inUse  map[string]*atomic.Int32
	last   map[string]token.Token
	grants atomic.Int64
}

func newExclusionLog(keys []string) *exclusionLog {
	x := &exclusionLog{inUse: map[string]*atomic.Int32{}, last: map[string]token.Token{}}
	for _, k := range keys {
		x.inUse[k] = new(atomic.Int32)
	}
	return x
}

// enter records the grants of leases; leave ends them.
func (x *exclusionLog) enter(t *testing.T, leases []locks.Lease) {
	for _, l := range leases {
		if n := x.inUse[l.Key()].Add(1); n != 1 {
			t.Errorf("key %q held by %d grants at once", l.Key(), n)
		}
		x.mu.Lock()
		if prev := x.last[l.Key()]; l.Token() <= prev {
			t.Errorf("key %q granted token %d after token %d", l.Key(), l.Token(), prev)
		}
		x.last[l.Key()] = l.Token()
		x.mu.Unlock()
	}
	x.grants.Add(1)
}

func (x *exclusionLog) leave(leases []locks.Lease) {
	for _, l := range leases {
		x.inUse[l.Key()].Add(-1)
	}
}

// Sets taken in one script and single keys taken by Acquire and
// TryAcquire, on the same keys and at the same time, never hold a key
// twice, and every key's tokens grow across both paths.
func TestTryAcquireAllExcludesSingleGrants(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	ctx := ctxFor(t, time.Minute)
	keys := []string{"a", "b", "c", "d"}
	x := newExclusionLog(keys)
	const ttl = 10 * time.Second
	stop := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for w := range 6 {
		l := newLocker(t, newClient(t, db.Addr), redislock.Options{Prefix: db.Prefix})
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for time.Now().Before(stop) && !t.Failed() {
				var held []locks.Lease
				switch w % 3 {
				case 0, 1: // a sorted set of two or three keys, in one script
					set := []string{}
					for _, k := range keys {
						if r.IntN(2) == 0 {
							set = append(set, k)
						}
					}
					if len(set) < 2 {
						set = keys[1:3]
					}
					ls, err := l.TryAcquireAll(ctx, set, ttl)
					if errors.Is(err, locks.ErrNotObtained) {
						time.Sleep(time.Duration(r.IntN(500)) * time.Microsecond)
						continue
					}
					if err != nil {
						t.Errorf("TryAcquireAll %q: %v", set, err)
						return
					}
					if len(ls) != len(set) {
						t.Errorf("TryAcquireAll %q granted %d leases", set, len(ls))
						return
					}
					for i, ll := range ls {
						if ll.Key() != set[i] {
							t.Errorf("lease %d is of %q, want %q", i, ll.Key(), set[i])
						}
					}
					held = ls
				case 2: // one key, waiting its turn
					k := keys[r.IntN(len(keys))]
					actx, cancel := context.WithTimeout(ctx, 5*time.Second)
					ll, err := l.Acquire(actx, k, ttl)
					cancel()
					if err != nil {
						t.Errorf("Acquire %q: %v", k, err)
						return
					}
					held = []locks.Lease{ll}
				}
				x.enter(t, held)
				time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
				x.leave(held)
				for _, ll := range held {
					if err := ll.Release(ctx); err != nil {
						t.Errorf("release %q: %v", ll.Key(), err)
					}
				}
			}
		})
	}
	wg.Wait()
	if x.grants.Load() < 50 {
		t.Fatalf("only %d grants in 2s", x.grants.Load())
	}
	t.Logf("%d grants", x.grants.Load())
}

// redisState is every key under prefix with its value (a zset's members
// and scores), so that a refusal can be shown to write nothing.
func redisState(t *testing.T, ctx context.Context, c *redis.Client, prefix string) map[string]string {
	t.Helper()
	names, err := c.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, n := range names {
		switch typ := c.Type(ctx, n).Val(); typ {
		case "string":
			m[n] = c.Get(ctx, n).Val()
		case "zset":
			m[n] = fmt.Sprint(c.ZRangeWithScores(ctx, n, 0, -1).Val())
		default:
			m[n] = typ
		}
	}
	return m
}

// A refused TryAcquireAll writes nothing: no lock of the free keys, no
// counter moved, no queue entry, whichever key of the set is the held one.
func TestTryAcquireAllRefusalLeavesRedisUntouched(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	c := newClient(t, db.Addr)
	ctx := ctxFor(t, 30*time.Second)
	l := newLocker(t, c, redislock.Options{Prefix: db.Prefix})
	keys := []string{"a", "b", "c"}
	// Give every key a counter, and b a waiter, first.
	for _, k := range keys {
		ls, err := l.TryAcquire(ctx, k, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i, held := range keys {
		h, err := l.TryAcquire(ctx, held, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		waited := make(chan error, 1)
		other := newLocker(t, newClient(t, db.Addr), redislock.Options{Prefix: db.Prefix})
		go func() {
			_, err := other.Acquire(wctx, held, 10*time.Second)
			waited <- err
		}()
		queue := db.Prefix + "{" + held + "}:q"
		waitFor(t, func() bool { return c.ZCard(ctx, queue).Val() == 1 })
		before := redisState(t, ctx, c, db.Prefix)
		_, err = l.TryAcquireAll(ctx, keys, 10*time.Second)
		if !errors.Is(err, locks.ErrNotObtained) {
			t.Fatalf("round %d: TryAcquireAll with %q held: %v, want ErrNotObtained", i, held, err)
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("%q", held)) {
			t.Errorf("round %d: the refusal %q does not name %q", i, err, held)
		}
		after := redisState(t, ctx, c, db.Prefix)
		if fmt.Sprint(before) != fmt.Sprint(after) {
			t.Errorf("round %d: the refusal changed Redis:\nbefore %v\nafter  %v", i, before, after)
		}
		cancel()
		if err := <-waited; !errors.Is(err, context.Canceled) {
			t.Fatalf("waiter: %v", err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return c.Exists(ctx, queue).Val() == 0 })
	}
}

// With a lock-delay, a key whose grant expired unreleased is refused to a
// set until the grant's Deadline plus the delay, and the set is granted
// once it is over; a waiter queued before the expiry waits as long.
func TestTryAcquireAllHonoursLockDelay(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	ctx := ctxFor(t, 30*time.Second)
	const delay = 1200 * time.Millisecond
	o := redislock.Options{Prefix: db.Prefix, LockDelay: delay}
	l := newLocker(t, newClient(t, db.Addr), o)
	waiter := newLocker(t, newClient(t, db.Addr), o)
	vanished, err := l.TryAcquire(ctx, "b", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	free := vanished.Deadline().Add(delay)
	queued := make(chan time.Time, 1)
	go func() {
		ls, err := waiter.Acquire(ctx, "b", 5*time.Second)
		at := time.Now()
		if err != nil {
			t.Errorf("waiter: %v", err)
			queued <- at
			return
		}
		queued <- at
		_ = ls.Release(ctx)
	}()
	tries := 0
	for {
		tries++
		ls, err := l.TryAcquireAll(ctx, []string{"a", "b", "c"}, 5*time.Second)
		at := time.Now()
		if errors.Is(err, locks.ErrNotObtained) {
			if at.After(free.Add(3 * time.Second)) {
				t.Fatalf("still refused %v after the delay", at.Sub(free))
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if at.Before(free) {
			t.Errorf("set granted %v before the expired grant's Deadline + delay", free.Sub(at))
		}
		if ls[1].Token() <= vanished.Token() {
			t.Errorf("token %d after the vanished grant's %d", ls[1].Token(), vanished.Token())
		}
		for _, s := range ls {
			if err := s.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		break
	}
	if at := <-queued; at.Before(free) {
		t.Errorf("waiter queued before the expiry granted %v before Deadline + delay", free.Sub(at))
	}
	t.Logf("%d tries", tries)
}

// AcquireAll cut short at any point — waiting for the first key, between
// keys, in a release hand-over — leaves no key of the set held or queued.
func TestAcquireAllCancelledLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	c := newClient(t, db.Addr)
	ctx := ctxFor(t, time.Minute)
	l := newLocker(t, newClient(t, db.Addr), redislock.Options{Prefix: db.Prefix})
	g, err := guard.New(l, guard.Options{TTL: 5 * time.Second, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	other := newLocker(t, newClient(t, db.Addr), redislock.Options{Prefix: db.Prefix})
	keys := []string{"a", "b", "c", "d"}
	r := rand.New(rand.NewPCG(1, 2))
	const rounds = 150
	cancelled := 0
	for round := range rounds {
		// Another holder keeps one key for a random while.
		busy := keys[r.IntN(len(keys))]
		h, err := other.TryAcquire(ctx, busy, 5*time.Second)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		hold := time.Duration(r.IntN(4000)) * time.Microsecond
		go func() {
			time.Sleep(hold)
			_ = h.Release(context.WithoutCancel(ctx))
		}()
		actx, cancel := context.WithTimeout(ctx, time.Duration(r.IntN(8000))*time.Microsecond)
		set := slicesShuffled(r, keys)
		s, err := g.AcquireAll(actx, set...)
		cancel()
		if err == nil {
			if err := s.Release(ctx); err != nil {
				t.Fatal(err)
			}
		} else {
			cancelled++
		}
		// Everything is free again soon: no lock, no queue.
		deadline := time.Now().Add(3 * time.Second)
		for {
			n := 0
			for _, k := range keys {
				n += int(c.Exists(ctx, db.Prefix+"{"+k+"}", db.Prefix+"{"+k+"}:q", db.Prefix+"{"+k+"}:qd").Val())
			}
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d (err %v): %v left 3s later", round, err, redisState(t, ctx, c, db.Prefix))
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	t.Logf("%d of %d cut short", cancelled, rounds)
}

func slicesShuffled(r *rand.Rand, s []string) []string {
	c := append([]string(nil), s...)
	r.Shuffle(len(c), func(i, j int) { c[i], c[j] = c[j], c[i] })
	return c
}

// A lease of a set deleted behind its back (an operator, an eviction)
// cancels the set's context with a cause naming that key.
func TestLeasesContextNamesTheKeyLost(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	c := newClient(t, db.Addr)
	ctx := ctxFor(t, 30*time.Second)
	l := newLocker(t, newClient(t, db.Addr), redislock.Options{Prefix: db.Prefix})
	g, err := guard.New(l, guard.Options{TTL: time.Second, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	s, err := g.AcquireAll(ctx, "c", "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Del(ctx, db.Prefix+"{b}").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Context().Done():
	case <-time.After(3 * time.Second):
		t.Fatal("set context not cancelled 3s after b's lock was deleted")
	}
	cause := context.Cause(s.Context())
	if !errors.Is(cause, guard.ErrLost) || !errors.Is(cause, locks.ErrNotHeld) {
		t.Errorf("cause %v, want ErrLost and ErrNotHeld", cause)
	}
	if !strings.Contains(cause.Error(), `"b"`) {
		t.Errorf("cause %q does not name b", cause)
	}
	if err := s.Lease("a").Context().Err(); err != nil {
		t.Errorf("a's lease ended with b's: %v", context.Cause(s.Lease("a").Context()))
	}
	if err := s.Release(ctx); !errors.Is(err, guard.ErrLost) {
		t.Errorf("Release: %v, want ErrLost", err)
	}
	if n := c.Exists(ctx, db.Prefix+"{a}", db.Prefix+"{c}").Val(); n != 0 {
		t.Errorf("%d locks of a and c left after Release", n)
	}
}

// A TryAcquireAll whose context ends while its script is in flight —
// granted or not — leaves no lock behind once its clean-up has run.
func TestTryAcquireAllCutShortLeavesNoLock(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	c := newClient(t, db.Addr)
	ctx := ctxFor(t, time.Minute)
	l := newLocker(t, newClient(t, db.Addr), redislock.Options{Prefix: db.Prefix})
	keys := []string{"a", "b", "c"}
	r := rand.New(rand.NewPCG(9, 9))
	granted, cut := 0, 0
	for round := range 400 {
		actx, cancel := context.WithTimeout(ctx, time.Duration(r.IntN(600))*time.Microsecond)
		ls, err := l.TryAcquireAll(actx, keys, 5*time.Second)
		cancel()
		if err == nil {
			granted++
			for _, s := range ls {
				if err := s.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
		} else {
			cut++
		}
		deadline := time.Now().Add(3 * time.Second)
		for {
			n := 0
			for _, k := range keys {
				n += int(c.Exists(ctx, db.Prefix+"{"+k+"}").Val())
			}
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d (err %v): %v left 3s later", round, err, redisState(t, ctx, c, db.Prefix))
			}
			time.Sleep(time.Millisecond)
		}
	}
	t.Logf("%d granted, %d cut short", granted, cut)
}
