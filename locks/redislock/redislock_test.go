package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/lockstest"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/fencetest"
)

// go-redis's pool keeps redialling a dead server from a goroutine that
// sleeps a second between tries and notices its client's Close only when
// it wakes (the Unreachable conformance test leaves one behind).
func TestMain(m *testing.M) {
	harness.DefaultParallel(parallel)
	redisserver.ExamplesNeed()
	examplesFromEnv()
	harness.Main(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// parallel is how many tests run at once unless -test.parallel says
// otherwise. Most tests wait on TTLs, failovers and timers, each on keys of
// its own or servers of its own, rather than use the CPU: go test's default
// of GOMAXPROCS would leave a 2-core machine mostly idle.
const parallel = 4

var discard = slog.New(slog.DiscardHandler)

func newClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newLocker(t testing.TB, c redislock.Client, o redislock.Options) *redislock.Locker {
	t.Helper()
	l, err := redislock.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestConformance(t *testing.T) {
	t.Parallel()
	lockstest.Run(t, lockstest.Config{
		NewLocker: func(t *testing.T) locks.Locker {
			db := redisserver.Shared(t)
			return newLocker(t, newClient(t, db.Addr), redislock.Options{Prefix: db.Prefix})
		},
		// A client with go-redis's defaults (retries, timeouts), as a
		// user's would be, through a proxy the test cuts.
		Unreachable: func(t *testing.T) (locks.Locker, func()) {
			db := redisserver.Shared(t)
			p := harness.NewProxy(t, db.Addr)
			c := redis.NewClient(&redis.Options{Addr: p.Addr()})
			t.Cleanup(func() { _ = c.Close() })
			return newLocker(t, c, redislock.Options{Prefix: db.Prefix}), func() { _ = p.Cut() }
		},
		Blackholed: func(t *testing.T) (locks.Locker, func()) {
			db := redisserver.Shared(t)
			p := harness.NewProxy(t, db.Addr)
			c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			return newLocker(t, c, redislock.Options{Prefix: db.Prefix}), func() { _ = p.Blackhole() }
		},
		LockDelay: func(t *testing.T) (locks.Locker, time.Duration) {
			const delay = 600 * time.Millisecond
			db := redisserver.Shared(t)
			return newLocker(t, newClient(t, db.Addr), redislock.Options{Prefix: db.Prefix, LockDelay: delay}), delay
		},
	})
}

// Redis restarted without persistence loses the counter; so does FLUSHALL.
// The clock floor must keep the next token above every earlier one.
func TestTokensSurviveLostCounters(t *testing.T) {
	t.Parallel()
	srv := redisserver.New(t)
	c := newClient(t, srv.Addr())
	l := newLocker(t, c, redislock.Options{})
	ctx := ctxFor(t, time.Minute)
	var highest token.Token
	grant := func(what string) {
		t.Helper()
		var lease locks.Lease
		var err error
		for range 50 { // the client reconnects after a restart
			if lease, err = l.Acquire(ctx, "k", 10*time.Second); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("%s: Acquire: %v", what, err)
		}
		if lease.Token() <= highest {
			t.Fatalf("%s: token %d is not above the earlier %d", what, lease.Token(), highest)
		}
		highest = lease.Token()
		_ = lease.Release(ctx) // may fail after a restart: the lock is gone
	}
	for range 20 {
		grant("before")
	}
	// A lease is held when the server goes away.
	held, err := l.Acquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	highest = held.Token()
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(true); err != nil {
		t.Fatal(err)
	}
	grant("after a restart without persistence")
	if err := held.Renew(ctx); !errors.Is(err, locks.ErrNotHeld) {
		t.Errorf("renew of a lease the restart erased: %v, want ErrNotHeld", err)
	}
	for range 5 {
		grant("after the restart")
	}
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	grant("after FLUSHALL")
}

// The holder's connection is cut: the guard must cancel the lease context
// within the TTL; a holder elsewhere then gets a larger token, and the cut
// holder's late release must not touch it.
func TestConnectionCutLosesLease(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	proxy := harness.NewProxy(t, db.Addr)
	cutOff := newLocker(t, newClient(t, proxy.Addr()), redislock.Options{Prefix: db.Prefix})
	other := newLocker(t, newClient(t, db.Addr), redislock.Options{Prefix: db.Prefix})
	const ttl = time.Second
	// Drift 5%: the loss must show well inside the TTL the test waits.
	g, err := guard.New(cutOff, guard.Options{TTL: ttl, Drift: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, time.Minute)
	lease, err := g.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	if err := proxy.Cut(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Context().Done():
		t.Logf("lease lost %v after the cut: %v", time.Since(cut), context.Cause(lease.Context()))
	case <-time.After(ttl):
		t.Fatalf("lease context still live %v after the cut", ttl)
	}
	if !errors.Is(context.Cause(lease.Context()), guard.ErrLost) {
		t.Fatalf("cause %v", context.Cause(lease.Context()))
	}
	next, err := other.Acquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() <= lease.Token() {
		t.Fatalf("new holder's token %d is not above the cut holder's %d", next.Token(), lease.Token())
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); !errors.Is(err, guard.ErrLost) {
		t.Errorf("cut holder's release: %v, want its LostError", err)
	}
	if err := next.Renew(ctx); err != nil {
		t.Fatalf("new holder lost the lock after the old one's release: %v", err)
	}
	_ = next.Release(ctx)
}

// The server is frozen past the TTL. Redis expiry follows the wall clock,
// which kept running: after the resume the old grant is gone. No two holders
// may believe they hold the lock with one token, and the state must be
// consistent: exactly one holder, whose renewals work.
func TestServerPausedPastTTL(t *testing.T) {
	t.Parallel()
	srv := redisserver.New(t)
	const ttl = 500 * time.Millisecond
	la := newLocker(t, newClient(t, srv.Addr()), redislock.Options{})
	lb := newLocker(t, newClient(t, srv.Addr()), redislock.Options{})
	ga, err := guard.New(la, guard.Options{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, time.Minute)
	a, err := ga.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	got := make(chan locks.Lease, 1)
	go func() {
		for ctx.Err() == nil { // B keeps trying through the pause
			if l, err := lb.Acquire(ctx, "k", 10*time.Second); err == nil {
				got <- l
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		got <- nil
	}()
	time.Sleep(3 * ttl)
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	b := <-got
	if b == nil {
		t.Fatal("B never acquired")
	}
	grantedB := time.Now()
	if b.Token() <= a.Token() {
		t.Fatalf("B's token %d is not above A's %d", b.Token(), a.Token())
	}
	select {
	case <-a.Context().Done():
	default:
		t.Fatalf("A still believes it holds the lock (deadline %v) when B got it at %v", a.Deadline(), grantedB)
	}
	if err := a.Release(ctx); !errors.Is(err, guard.ErrLost) {
		t.Errorf("A's release: %v, want its LostError", err)
	}
	if err := b.Renew(ctx); err != nil {
		t.Fatalf("B's renewal after the resume: %v", err)
	}
	if _, err := la.TryAcquire(ctx, "k", time.Second); !errors.Is(err, locks.ErrNotObtained) {
		t.Fatalf("TryAcquire while B holds: %v", err)
	}
	_ = b.Release(ctx)
}

// Waiters are served in the order they queued, across lockers (processes).
func TestWaitersServedInArrivalOrder(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	c := newClient(t, db.Addr)
	ctx := ctxFor(t, time.Minute)
	holder := newLocker(t, c, redislock.Options{Prefix: db.Prefix})
	first, err := holder.Acquire(ctx, "k", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	queue := db.Prefix + "{k}:q"
	const n = 6
	order := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		l := newLocker(t, newClient(t, db.Addr), redislock.Options{Prefix: db.Prefix})
		wg.Go(func() {
			lease, err := l.Acquire(ctx, "k", 30*time.Second)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			order <- i
			time.Sleep(5 * time.Millisecond)
			if err := lease.Release(ctx); err != nil {
				t.Errorf("waiter %d release: %v", i, err)
			}
		})
		// Queue the next waiter only once this one is in the queue.
		waitFor(t, func() bool { return c.ZCard(ctx, queue).Val() == int64(i+1) })
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(order)
	want := 0
	for got := range order {
		if got != want {
			t.Fatalf("waiter %d was served when waiter %d's turn came", got, want)
		}
		want++
	}
}

// A waiter that dies in the queue (no heartbeat, no abandon) may hold up the
// others for at most WaiterTTL.
func TestDeadWaiterDoesNotBlockQueue(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	c := newClient(t, db.Addr)
	ctx := ctxFor(t, time.Minute)
	const waiterTTL = 300 * time.Millisecond
	l := newLocker(t, c, redislock.Options{Prefix: db.Prefix, WaiterTTL: waiterTTL})
	holder, err := l.Acquire(ctx, "k", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// A ghost waiter, first in line, as a crashed process would leave it.
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	// It asked for a 300ms lease; it still looks alive when the release
	// comes, so it is handed the lock — and holds it up for that TTL.
	const ghost = "ghost|300"
	c.ZAdd(ctx, db.Prefix+"{k}:q", redis.Z{Score: float64(now.UnixMicro() - 1e6), Member: ghost})
	c.ZAdd(ctx, db.Prefix+"{k}:qd", redis.Z{Score: float64(now.Add(waiterTTL).UnixMilli()), Member: ghost})
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lat := harness.StartLateness(t)
	start := time.Now()
	lease, err := l.Acquire(ctx, "k", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if d, allowed := time.Since(start), waiterTTL+lat.Allowance(waiterTTL, start.Add(waiterTTL)); d > allowed {
		t.Fatalf("the dead waiter held the lock up for %v, want under %v (its TTL, and the scheduler's delays)", d, allowed)
	}
	_ = lease.Release(ctx)
}

// Idle keys do not pile up: after release nothing but the counter and its
// heal offset remain, and both expire after CounterIdle.
func TestIdleKeysExpire(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	c := newClient(t, db.Addr)
	ctx := ctxFor(t, time.Minute)
	const idle = 4 * time.Second
	l := newLocker(t, c, redislock.Options{Prefix: db.Prefix, CounterIdle: idle})
	start := time.Now()
	for i := range 100 {
		lease, err := l.Acquire(ctx, fmt.Sprint("k", i), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := c.Keys(ctx, db.Prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	// The first counters may have expired already if the loop took nearly
	// CounterIdle (a loaded machine): then only the expiry is checked.
	// Each lock leaves its counter (the heal offset is in the same key).
	if len(keys) != 100 && time.Since(start) < idle/2 {
		t.Fatalf("%d keys after 100 released locks, want the 100 counters: %v", len(keys), keys[:min(len(keys), 5)])
	}
	waitFor(t, func() bool { return len(c.Keys(ctx, db.Prefix+"*").Val()) == 0 })
}

func TestHeal(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	l := newLocker(t, newClient(t, db.Addr), redislock.Options{Prefix: db.Prefix})
	ctx := ctxFor(t, time.Minute)
	lease, err := l.Acquire(ctx, "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = lease.Release(ctx)
	// A resource reports a high-water far above the counter (set by an
	// earlier counter that was lost, with the clock since stepped back).
	hw := lease.Token() + 1e12
	got, err := l.Heal(ctx, "k", hw)
	if err != nil || got != hw {
		t.Fatalf("Heal = %d, %v; want %d", got, err, hw)
	}
	next, err := l.Acquire(ctx, "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() <= hw {
		t.Fatalf("token %d after healing to %d", next.Token(), hw)
	}
	_ = next.Release(ctx)
	// Healing never lowers the counter.
	if got, err := l.Heal(ctx, "k", 5); err != nil || got <= hw {
		t.Fatalf("Heal to 5 = %d, %v; want the counter left above %d", got, err, hw)
	}
	var re *token.RangeError
	if _, err := l.Heal(ctx, "k", (redislock.MaxToken-1)+1); !errors.Is(err, locks.ErrInvalidArgument) || !errors.As(err, &re) {
		t.Fatalf("Heal to the ceiling = %v, want ErrInvalidArgument and a RangeError", err)
	}
}

func TestIssuedBoundsGrantedTokens(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	l := newLocker(t, newClient(t, db.Addr), redislock.Options{Prefix: db.Prefix})
	ctx := ctxFor(t, time.Minute)
	before, err := l.Issued(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	lease, err := l.Acquire(ctx, "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	if lease.Token() <= before {
		t.Errorf("token %d not above the earlier bound %d", lease.Token(), before)
	}
	after, err := l.Issued(ctx, "k")
	if err != nil || after < lease.Token() {
		t.Fatalf("Issued = %d, %v after granting %d", after, err, lease.Token())
	}
	// Far above the clock is never issued: a forged 2^64-1 is caught.
	if after > lease.Token()+token.Token(time.Minute/time.Microsecond) {
		t.Errorf("Issued = %d, a minute above the last grant %d", after, lease.Token())
	}
}

// The contract, with tokens beyond 2^53 (where Lua's doubles could not tell
// neighbours apart; the script compares strings).
func TestFenceConformance(t *testing.T) {
	t.Parallel()
	fencetest.Run(t, func(t *testing.T, check token.Check) fencetest.Subject {
		db := redisserver.Shared(t)
		f := redislock.NewFence(newClient(t, db.Addr), redislock.FenceOptions{Prefix: db.Prefix, Check: check, Logger: discard})
		return fencetest.Subject{Fence: f, HighWater: f.HighWater}
	})
}

// Concurrent claims with random tokens from several clients. For every
// accepted claim a and every claim b that started after a returned, b must
// be refused if its token is lower: the accepted tokens form a monotone
// sequence in real time. The final mark is the largest token presented.
func TestFenceConcurrentClaimsAreMonotone(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	ctx := ctxFor(t, time.Minute)
	type claim struct {
		start, end time.Time
		tok        token.Token
		ok         bool
	}
	var mu sync.Mutex
	var all []claim
	var wg sync.WaitGroup
	for range 8 {
		f := redislock.NewFence(newClient(t, db.Addr), redislock.FenceOptions{Prefix: db.Prefix})
		wg.Go(func() {
			for range 150 {
				tok := token.Token(1 + rand.IntN(2000))
				start := time.Now()
				err := f.Claim(ctx, "r", tok)
				end := time.Now()
				if err != nil && !errors.Is(err, token.ErrStale) {
					t.Errorf("Claim: %v", err)
					return
				}
				mu.Lock()
				all = append(all, claim{start, end, tok, err == nil})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	var maxTok token.Token
	for _, a := range all {
		maxTok = max(maxTok, a.tok)
		if !a.ok {
			continue
		}
		for _, b := range all {
			if b.start.After(a.end) && b.tok < a.tok && b.ok {
				t.Fatalf("token %d accepted after %d had been accepted", b.tok, a.tok)
			}
		}
	}
	f := redislock.NewFence(newClient(t, db.Addr), redislock.FenceOptions{Prefix: db.Prefix})
	if hw, err := f.HighWater(ctx, "r"); err != nil || hw != maxTok {
		t.Fatalf("final high-water %d, %v; want the largest presented, %d", hw, err, maxTok)
	}
}

func TestBadOptions(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, o := range []redislock.Options{{WaiterTTL: time.Millisecond}, {CounterIdle: time.Millisecond},
		{LockDelay: -time.Millisecond}, {LockDelay: locks.MaxLockDelay + time.Millisecond}} {
		if _, err := redislock.New(c, o); !errors.Is(err, locks.ErrInvalidArgument) {
			t.Errorf("New(%+v) = %v, want ErrInvalidArgument", o, err)
		}
	}
	if _, err := redislock.New(nil, redislock.Options{}); !errors.Is(err, locks.ErrInvalidArgument) {
		t.Errorf("New(nil) = %v", err)
	}
}

func TestClosedLocker(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	l := newLocker(t, newClient(t, db.Addr), redislock.Options{Prefix: db.Prefix})
	ctx := ctxFor(t, time.Minute)
	held, err := l.Acquire(ctx, "k", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := l.Acquire(ctx, "k", time.Second); errc <- err }()
	time.Sleep(50 * time.Millisecond)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, locks.ErrClosed) {
		t.Fatalf("blocked Acquire after Close = %v, want ErrClosed", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatalf("release after Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
