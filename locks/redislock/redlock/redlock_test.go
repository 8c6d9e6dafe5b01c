package redlock_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/lockstest"
	"github.com/fenceguard/fenceguard/locks/redislock/redlock"
	"github.com/fenceguard/fenceguard/token"
)

func TestMain(m *testing.M) {
	// Dead nodes make go-redis log every failed dial; the tests kill nodes
	// on purpose.
	redis.SetLogger(quiet{})
	// go-redis probes a node whose dials keep failing from a goroutine that
	// sleeps a second between probes and ends at its next wake-up after the
	// client closed: not ours, and not a leak.
	harness.Main(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func clients(t testing.TB, addrs []string) []redlock.Client {
	t.Helper()
	var cs []redlock.Client
	for _, a := range addrs {
		// One dial attempt: go-redis otherwise retries a dead node's dial
		// five times, 100ms apart, and each call waits out NodeTimeout.
		c := redis.NewClient(redlock.OneDial(redis.Options{Addr: a, MaxRetries: -1, DialTimeout: time.Second}))
		t.Cleanup(func() { _ = c.Close() })
		cs = append(cs, c)
	}
	return cs
}

func newLocker(t testing.TB, cs []redlock.Client, o redlock.Options) *redlock.Locker {
	t.Helper()
	l, err := redlock.New(cs, o)
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
	lockstest.Run(t, lockstest.Config{
		NewLocker: func(t *testing.T) locks.Locker {
			var addrs []string
			var prefix string
			for _, db := range redisserver.SharedN(t, 5) {
				addrs, prefix = append(addrs, db.Addr), db.Prefix
			}
			return newLocker(t, clients(t, addrs), redlock.Options{Prefix: prefix})
		},
		// Clients with go-redis's defaults (retries, timeouts), as a
		// user's would be, through proxies the test cuts.
		Unreachable: func(t *testing.T) (locks.Locker, func()) {
			var cs []redlock.Client
			var ps []*harness.Proxy
			var prefix string
			for _, db := range redisserver.SharedN(t, 3) {
				p := harness.NewProxy(t, db.Addr)
				c := redis.NewClient(&redis.Options{Addr: p.Addr()})
				t.Cleanup(func() { _ = c.Close() })
				cs, ps, prefix = append(cs, c), append(ps, p), db.Prefix
			}
			return newLocker(t, cs, redlock.Options{Prefix: prefix}), func() {
				for _, p := range ps {
					_ = p.Cut()
				}
			}
		},
		Blackholed: func(t *testing.T) (locks.Locker, func()) {
			var cs []redlock.Client
			var ps []*harness.Proxy
			var prefix string
			for _, db := range redisserver.SharedN(t, 3) {
				p := harness.NewProxy(t, db.Addr)
				c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
				t.Cleanup(func() { _ = c.Close() })
				cs, ps, prefix = append(cs, c), append(ps, p), db.Prefix
			}
			return newLocker(t, cs, redlock.Options{Prefix: prefix}), func() {
				for _, p := range ps {
					_ = p.Blackhole()
				}
			}
		},
		LockDelay: func(t *testing.T) (locks.Locker, time.Duration) {
			const delay = 600 * time.Millisecond
			var addrs []string
			var prefix string
			for _, db := range redisserver.SharedN(t, 5) {
				addrs, prefix = append(addrs, db.Addr), db.Prefix
			}
			return newLocker(t, clients(t, addrs), redlock.Options{Prefix: prefix, LockDelay: delay}), delay
		},
	})
}

func TestLockDelayOutOfRangeIsRefused(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, d := range []time.Duration{-time.Millisecond, locks.MaxLockDelay + time.Millisecond} {
		if _, err := redlock.New([]redlock.Client{c}, redlock.Options{LockDelay: d}); !errors.Is(err, locks.ErrInvalidArgument) {
			t.Errorf("LockDelay %v: %v, want ErrInvalidArgument", d, err)
		}
	}
}

func dedicated(t *testing.T, n int) ([]*harness.Server, []redlock.Client) {
	srvs := redisserver.NewN(t, n)
	var addrs []string
	for _, s := range srvs {
		addrs = append(addrs, s.Addr())
	}
	return srvs, clients(t, addrs)
}

// With 2 of 5 nodes down the lock still works; with 3 down it fails with
// a QuorumError and issues no token.
func TestQuorum(t *testing.T) {
	srvs, cs := dedicated(t, 5)
	l := newLocker(t, cs, redlock.Options{})
	ctx := ctxFor(t, time.Minute)
	var last token.Token
	for down := 0; down <= 3; down++ {
		if down > 0 {
			if err := srvs[down-1].Kill(); err != nil {
				t.Fatal(err)
			}
		}
		lease, err := l.Acquire(ctx, "k", 5*time.Second)
		if down <= 2 {
			if err != nil {
				t.Fatalf("%d of 5 nodes down: %v", down, err)
			}
			if lease.Token() <= last {
				t.Fatalf("token %d after %d", lease.Token(), last)
			}
			last = lease.Token()
			if err := lease.Release(ctx); err != nil {
				t.Fatalf("release with %d nodes down: %v", down, err)
			}
			continue
		}
		var qe *redlock.QuorumError
		if !errors.As(err, &qe) || lease != nil {
			t.Fatalf("3 of 5 nodes down: %v, %v; want a QuorumError and no lease", lease, err)
		}
		t.Logf("3 down: %v", err)
		if _, err := l.TryAcquire(ctx, "k", 5*time.Second); !errors.As(err, &qe) {
			t.Fatalf("TryAcquire with 3 down: %v", err)
		}
	}
}

// Over a thousand grants, and at least ten node restarts, while a chaos
// goroutine kills and restarts nodes without persistence (at most two down
// at a time), between and during grants: tokens strictly increase and
// never repeat.
func TestTokensMonotonicUnderNodeRestarts(t *testing.T) {
	srvs, cs := dedicated(t, 5)
	l := newLocker(t, cs, redlock.Options{})
	ctx := ctxFor(t, 5*time.Minute)
	stop := make(chan struct{})
	var restarts atomic.Int32
	var chaos sync.WaitGroup
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }); chaos.Wait() }
	defer halt()
	chaos.Go(func() {
		down := map[int]bool{}
		for {
			select {
			case <-stop:
				for i := range down {
					_ = srvs[i].Start(true)
				}
				return
			case <-time.After(time.Duration(10+rand.IntN(40)) * time.Millisecond):
			}
			i := rand.IntN(len(srvs))
			switch {
			case down[i]:
				if err := srvs[i].Start(true); err != nil { // wiped: counter and lock lost
					t.Errorf("restart node %d: %v", i, err)
					return
				}
				delete(down, i)
				restarts.Add(1)
			case len(down) < 2:
				if err := srvs[i].Kill(); err != nil {
					t.Errorf("kill node %d: %v", i, err)
					return
				}
				down[i] = true
			}
		}
	})
	var last token.Token
	seen := map[token.Token]bool{}
	grants, failures := 0, 0
	// At least a thousand grants, and on until the chaos has restarted ten
	// nodes (on a loaded machine restarts are slow and grants fast).
	for grants < 1000 || restarts.Load() < 10 {
		if ctx.Err() != nil {
			t.Fatalf("%d grants, %d node restarts when the test's time ran out", grants, restarts.Load())
		}
		lease, err := l.Acquire(ctx, "k", 200*time.Millisecond)
		if err != nil {
			var qe *redlock.QuorumError
			if !errors.As(err, &qe) {
				t.Fatalf("grant %d: %v", grants, err)
			}
			failures++ // too many nodes down at once (as this client sees them): no token
			time.Sleep(5 * time.Millisecond)
			continue
		}
		tok := lease.Token()
		if tok <= last || seen[tok] {
			t.Fatalf("grant %d: token %d after %d (seen before: %v)", grants, tok, last, seen[tok])
		}
		seen[tok], last = true, tok
		grants++
		_ = lease.Release(ctx) // may fail when nodes died meanwhile: the lock then expires
	}
	halt()
	t.Logf("%d grants, %d node restarts, %d attempts without quorum", grants, restarts.Load(), failures)
}

func TestIssuedAndHeal(t *testing.T) {
	var addrs []string
	var prefix string
	for _, db := range redisserver.SharedN(t, 5) {
		addrs, prefix = append(addrs, db.Addr), db.Prefix
	}
	l := newLocker(t, clients(t, addrs), redlock.Options{Prefix: prefix})
	ctx := ctxFor(t, time.Minute)
	lease, err := l.Acquire(ctx, "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = lease.Release(ctx)
	if got, err := l.Issued(ctx, "k"); err != nil || got < lease.Token() {
		t.Fatalf("Issued = %d, %v after granting %d", got, err, lease.Token())
	}
	hw := lease.Token() + 1e12
	if err := l.Heal(ctx, "k", hw); err != nil {
		t.Fatal(err)
	}
	next, err := l.Acquire(ctx, "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if next.Token() <= hw {
		t.Fatalf("token %d after healing to %d", next.Token(), hw)
	}
	if err := l.Heal(ctx, "k", token.MaxInt64); !errors.Is(err, locks.ErrInvalidArgument) || !errors.Is(err, token.ErrRange) {
		t.Fatalf("Heal to the ceiling: %v", err)
	}
}
