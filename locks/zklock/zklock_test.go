package zklock_test

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/lockstest"
	"github.com/fenceguard/fenceguard/locks/zklock"
	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/fencetest"
)

func TestMain(m *testing.M) {
	harness.DefaultParallel(parallel)
	harness.Main(m)
}

// parallel is how many tests run at once unless -test.parallel says
// otherwise. Most tests wait on session timeouts, watches and timers, each
// on a chroot or a server or ensemble of its own, rather than use the CPU:
// go test's default of GOMAXPROCS would leave a 2-core machine mostly idle.
// Kept low: each ensemble is three JVMs to start.
const parallel = 3

type quiet struct{}

func (quiet) Printf(string, ...any) {}

func newLocker(t testing.TB, addrs []string, prefix string) *zklock.Locker {
	t.Helper()
	l, err := zklock.New(addrs, zklock.Options{Prefix: prefix, Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// inspect returns a plain connection for looking at the znodes.
func inspect(t testing.TB, addrs []string) *zk.Conn {
	t.Helper()
	c, events, err := zk.Connect(addrs, 10*time.Second, zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		for range events { // until go-zookeeper's goroutines are done
		}
	})
	return c
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// children lists the znodes queued for key under prefix.
func children(t *testing.T, c *zk.Conn, prefix, key string) []string {
	t.Helper()
	ch, _, err := c.Children(prefix + "/" + key)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func eventually(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	lockstest.Run(t, lockstest.Config{
		NewLocker: func(t *testing.T) locks.Locker {
			z := zkserver.Shared(t)
			return newLocker(t, z.Addrs, z.Chroot+"/locks")
		},
		// The harness's server grants sessions of 1s to 60s. A 1s session
		// pings every third of a second, and a ping late by more than that
		// breaks the connection, which ends its leases: on a loaded 2-core
		// machine that happened (RenewExtends, "connection lost"). 2s
		// leaves room and still expires within a test's patience.
		ShortTTL: 2 * time.Second,
		LongTTL:  30 * time.Second,
		Unreachable: func(t *testing.T) (locks.Locker, func()) {
			z := zkserver.Shared(t)
			p := harness.NewProxy(t, z.Addrs[0])
			return newLocker(t, []string{p.Addr()}, z.Chroot+"/locks"), func() { _ = p.Cut() }
		},
		Blackholed: func(t *testing.T) (locks.Locker, func()) {
			z := zkserver.Shared(t)
			p := harness.NewProxy(t, z.Addrs[0])
			return newLocker(t, []string{p.Addr()}, z.Chroot+"/locks"), func() { _ = p.Blackhole() }
		},
		LockDelay: func(t *testing.T) (locks.Locker, time.Duration) {
			z := zkserver.Shared(t)
			return newDelayLocker(t, z.Addrs, z.Chroot+"/locks", lockDelay), lockDelay
		},
	})
}

// lockDelay is the tests' lock-delay: with the 2s and 30s TTLs, sessions
// of 3.5s and 31.5s, within the harness server's 60s maximum.
const lockDelay = 1500 * time.Millisecond

func newDelayLocker(t testing.TB, addrs []string, prefix string, delay time.Duration) *zklock.Locker {
	t.Helper()
	l, err := zklock.New(addrs, zklock.Options{Prefix: prefix, Logger: quiet{}, LockDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func TestLockDelayOutOfRangeIsRefused(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{-time.Millisecond, locks.MaxLockDelay + time.Millisecond} {
		if _, err := zklock.New([]string{"127.0.0.1:1"}, zklock.Options{LockDelay: d}); !errors.Is(err, locks.ErrInvalidArgument) {
			t.Errorf("LockDelay %v: %v, want ErrInvalidArgument", d, err)
		}
	}
}

// A session cannot outlive the server's maximum timeout (60s on the
// harness's server): a TTL whose lock-delay would need a longer one is
// refused, though the TTL alone fits.
func TestLockDelayAboveMaxSessionTimeoutIsRefused(t *testing.T) {
	t.Parallel()
	z := zkserver.Shared(t)
	l := newDelayLocker(t, z.Addrs, z.Chroot+"/locks", 40*time.Second)
	ctx := ctxFor(t, time.Minute)
	if _, err := l.Acquire(ctx, "k", 30*time.Second); !errors.Is(err, locks.ErrInvalidArgument) {
		t.Fatalf("Acquire with TTL 30s and lock-delay 40s: %v, want ErrInvalidArgument", err)
	}
	lease, err := l.Acquire(ctx, "k", 2*time.Second)
	if err != nil {
		t.Fatalf("Acquire with TTL 2s and lock-delay 40s: %v", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A holder whose connection is cut loses its lease at once, but its znode
// stays — the session may still live — and the waiter is granted no
// earlier than the holder's Deadline plus the delay: the lost session, not
// a Release.
func TestLockDelayAfterLostConnection(t *testing.T) {
	t.Parallel()
	z := zkserver.Shared(t)
	prefix := z.Chroot + "/locks"
	ctx := ctxFor(t, time.Minute)
	p := harness.NewProxy(t, z.Addrs[0])
	holder, err := newDelayLocker(t, []string{p.Addr()}, prefix, lockDelay).Acquire(ctx, "k", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		lease, err := newDelayLocker(t, z.Addrs, prefix, lockDelay).Acquire(ctx, "k", 2*time.Second)
		if err != nil {
			t.Error(err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		_ = lease.Release(ctx)
	}()
	time.Sleep(200 * time.Millisecond) // let it queue; nothing to observe
	_ = p.Cut()
	select {
	case <-holder.(locks.LossNotifier).Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the cut holder's lease was not reported lost")
	}
	at := <-got
	if at.IsZero() {
		t.FailNow()
	}
	if bound := holder.Deadline().Add(lockDelay); at.Before(bound) {
		t.Errorf("waiter granted %v before the cut holder's Deadline plus the delay", bound.Sub(at))
	}
}

// Waiters on different connections are served in the order they queued.
func TestFIFOAcrossConnections(t *testing.T) {
	t.Parallel()
	z := zkserver.Shared(t)
	prefix := z.Chroot + "/locks"
	c := inspect(t, z.Addrs)
	ctx := ctxFor(t, time.Minute)
	first, err := newLocker(t, z.Addrs, prefix).Acquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	order := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		l := newLocker(t, z.Addrs, prefix)
		wg.Go(func() {
			lease, err := l.Acquire(ctx, "k", 10*time.Second)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			order <- i
			if err := lease.Release(ctx); err != nil {
				t.Errorf("waiter %d release: %v", i, err)
			}
		})
		eventually(t, 10*time.Second, "waiter queued", func() bool { return len(children(t, c, prefix, "k")) == i+2 })
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

// Any string is a key, and distinct strings are distinct locks: escaping
// must be injective and must not produce paths ZooKeeper refuses.
func TestAnyStringIsAKey(t *testing.T) {
	t.Parallel()
	z := zkserver.Shared(t)
	l := newLocker(t, z.Addrs, z.Chroot+"/locks")
	ctx := ctxFor(t, time.Minute)
	keys := []string{
		"a/b", "a%2Fb", "a%252Fb", "/", "//", "/a/", ".", "..", "...", "./..",
		"ключ/🔒", "名前", "tab\there", "nul\x00byte", "new\nline", "\u007f\u0085",
		"zero-width\u200b", "space ", " ", "%", "?#&=", "\xff\xfe invalid utf-8",
	}
	var held []locks.Lease
	for _, k := range keys {
		lease, err := l.TryAcquire(ctx, k, 10*time.Second)
		if err != nil {
			t.Fatalf("TryAcquire(%q) with the other keys held: %v", k, err)
		}
		if lease.Key() != k {
			t.Fatalf("Key() = %q, want %q", lease.Key(), k)
		}
		held = append(held, lease)
	}
	paths := map[string]string{}
	for _, lease := range held {
		p := lease.(*zklock.Lease).Path()
		if other, ok := paths[p]; ok {
			t.Fatalf("keys %q and %q share the znode %s", other, lease.Key(), p)
		}
		paths[p] = lease.Key()
		if _, err := l.TryAcquire(ctx, lease.Key(), 10*time.Second); !errors.Is(err, locks.ErrNotObtained) {
			t.Fatalf("TryAcquire(%q) while held: %v", lease.Key(), err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A failed try-acquire leaves no znode behind by the time it returns, and a
// cancelled waiter none soon after.
func TestAbandonedAcquireLeavesNothing(t *testing.T) {
	t.Parallel()
	z := zkserver.Shared(t)
	prefix := z.Chroot + "/locks"
	l := newLocker(t, z.Addrs, prefix)
	c := inspect(t, z.Addrs)
	ctx := ctxFor(t, time.Minute)
	holder, err := l.Acquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err := l.Acquire(wctx, "k", 10*time.Second)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("waiter: %v, want DeadlineExceeded", err)
		}
		// The clean-up of an acquire cut short by its context may finish
		// in the background (the package doc), later than the return on
		// a loaded machine: bounded.
		eventually(t, 5*time.Second, "the cancelled waiter's znode gone", func() bool {
			return len(children(t, c, prefix, "k")) == 1
		})
		if _, err := l.TryAcquire(ctx, "k", 10*time.Second); !errors.Is(err, locks.ErrNotObtained) {
			t.Fatalf("TryAcquire: %v, want ErrNotObtained", err)
		}
		if got := children(t, c, prefix, "k"); len(got) != 1 {
			t.Fatalf("after a failed try the queue is %v, want only the holder", got)
		}
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := children(t, c, prefix, "k"); len(got) != 0 {
		t.Fatalf("after the release the queue is %v", got)
	}
}

// The reply to the create is lost: the server applied it, the connection
// broke before the reply arrived. A live acquire must carry on with the
// znode it made (not queue a second one behind itself); an abandoned one
// must delete it once it can.
func TestLostCreateReply(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		abandon bool
	}{{"adopted", false}, {"abandoned", true}} {
		t.Run(tc.name, func(t *testing.T) {
			z := zkserver.Shared(t)
			prefix := z.Chroot + "/locks"
			proxy := harness.NewProxy(t, z.Addrs[0])
			l := newLocker(t, []string{proxy.Addr()}, prefix)
			c := inspect(t, z.Addrs)
			ctx := ctxFor(t, time.Minute)
			const ttl = 8 * time.Second // the session must outlive the cut
			// Open the session and create the key's znode.
			warm, err := l.Acquire(ctx, "k", ttl)
			if err != nil {
				t.Fatal(err)
			}
			if err := warm.Release(ctx); err != nil {
				t.Fatal(err)
			}

			if err := proxy.Delay(3 * time.Second); err != nil { // hold back every reply
				t.Fatal(err)
			}
			actx, cancel := context.WithCancel(ctx)
			defer cancel()
			type result struct {
				lease locks.Lease
				err   error
			}
			got := make(chan result, 1)
			go func() {
				lease, err := l.Acquire(actx, "k", ttl)
				got <- result{lease, err}
			}()
			var made []string
			eventually(t, 5*time.Second, "the create applied", func() bool {
				made = children(t, c, prefix, "k")
				return len(made) == 1
			})
			if tc.abandon {
				cancel()
				select {
				case r := <-got:
					if !errors.Is(r.err, context.Canceled) {
						t.Fatalf("abandoned Acquire: %v, %v", r.lease, r.err)
					}
				case <-time.After(time.Second):
					t.Fatal("Acquire did not return after its context was cancelled")
				}
			}
			if err := proxy.Cut(); err != nil { // the held-back reply is lost
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond)
			if err := proxy.Restore(); err != nil {
				t.Fatal(err)
			}
			if tc.abandon {
				eventually(t, 10*time.Second, "the abandoned znode deleted", func() bool {
					return len(children(t, c, prefix, "k")) == 0
				})
				return
			}
			r := <-got
			if r.err != nil {
				t.Fatalf("Acquire: %v", r.err)
			}
			defer r.lease.Release(ctx)
			p := r.lease.(*zklock.Lease).Path()
			if p != prefix+"/k/"+made[0] {
				t.Fatalf("the lease's znode is %s, want the one the lost create made: %s", p, made[0])
			}
			_, st, err := c.Get(p)
			if err != nil {
				t.Fatal(err)
			}
			if uint64(r.lease.Token()) != uint64(st.Czxid) {
				t.Fatalf("token %d, znode Czxid %d", r.lease.Token(), st.Czxid)
			}
			if q := children(t, c, prefix, "k"); len(q) != 1 {
				t.Fatalf("queue %v: want only the adopted znode", q)
			}
		})
	}
}

// The holder's connection is cut past its session timeout: its lease ends
// at once (Done, then the guard's context), the next holder gets a larger
// token once the server expired the session, and the cut holder's late
// release leaves the new grant alone.
func TestHolderCutOffPastSessionTimeout(t *testing.T) {
	t.Parallel()
	z := zkserver.Shared(t)
	prefix := z.Chroot + "/locks"
	proxy := harness.NewProxy(t, z.Addrs[0])
	cutOff := newLocker(t, []string{proxy.Addr()}, prefix)
	other := newLocker(t, z.Addrs, prefix)
	const ttl = 2 * time.Second
	var inner *zklock.Lease
	g, err := guard.New(spy{cutOff, &inner}, guard.Options{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, time.Minute)
	lease, err := g.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := proxy.Cut(); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	select {
	case <-inner.Lost():
		t.Logf("zklock lease ended %v after the cut", time.Since(cut))
	case <-time.After(ttl):
		t.Fatal("lease not ended after the cut")
	}
	select {
	case <-lease.Context().Done():
		cause := context.Cause(lease.Context())
		t.Logf("guard lease lost %v after the cut: %v", time.Since(cut), cause)
		// Through Lost (LossNotifier), not found out at the next renewal.
		if cause == nil || !strings.Contains(cause.Error(), "reported the lease lost") {
			t.Errorf("guard lease lost for %v, want the session's report", cause)
		}
	case <-time.After(ttl):
		t.Fatalf("guard lease context still live %v after the cut", ttl)
	}
	next, err := other.Acquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(cut); waited < ttl {
		t.Fatalf("next holder got the lock %v after the cut, before the %v session could expire", waited, ttl)
	}
	if next.Token() <= lease.Token() {
		t.Fatalf("next token %d not above the cut holder's %d", next.Token(), lease.Token())
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); !errors.Is(err, guard.ErrLost) {
		t.Errorf("cut holder's release: %v, want its ErrLost", err)
	}
	// Also with the raw lease, once the cut locker has a session again.
	eventually(t, 10*time.Second, "a new session", func() bool {
		l, err := cutOff.TryAcquire(ctx, "other", ttl)
		if err == nil {
			_ = l.Release(ctx)
		}
		return err == nil
	})
	if err := inner.Release(ctx); !errors.Is(err, locks.ErrNotHeld) {
		t.Errorf("raw release of the cut grant: %v, want ErrNotHeld", err)
	}
	if err := next.Renew(ctx); err != nil {
		t.Fatalf("new grant lost after the old holder's release: %v", err)
	}
	_ = next.Release(ctx)
}

// spy is a locker that records the last lease it granted.
type spy struct {
	l    *zklock.Locker
	last **zklock.Lease
}

func (s spy) Acquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	lease, err := s.l.Acquire(ctx, key, ttl)
	if err == nil {
		*s.last = lease.(*zklock.Lease)
	}
	return lease, err
}

func (s spy) TryAcquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	lease, err := s.l.TryAcquire(ctx, key, ttl)
	if err == nil {
		*s.last = lease.(*zklock.Lease)
	}
	return lease, err
}

// The server restarts while a lease is held. The holder must give the lease
// up (it cannot know whether its session survives); nobody else gets the
// lock before it has; tokens keep growing; the old release is harmless.
func TestServerRestartWhileHeld(t *testing.T) {
	t.Parallel()
	srv := zkserver.New(t)
	addrs := []string{srv.Addr()}
	holder := newLocker(t, addrs, "/locks")
	other := newLocker(t, addrs, "/locks")
	const ttl = 6 * time.Second // long enough for the session to survive the restart
	g, err := guard.New(holder, guard.Options{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, 2*time.Minute)
	lease, err := g.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	select {
	case <-lease.Context().Done():
		t.Logf("lease lost %v after the stop: %v", time.Since(stopped), context.Cause(lease.Context()))
	case <-time.After(ttl):
		t.Fatal("lease context live while the server is down")
	}
	if err := srv.Start(false); err != nil {
		t.Fatal(err)
	}
	got := make(chan locks.Lease, 1)
	go func() {
		next, err := other.Acquire(ctx, "k", ttl)
		if err != nil {
			t.Errorf("next holder: %v", err)
			close(got)
			return
		}
		got <- next
	}()
	// The holder's session probably survived the restart, and with it the
	// znode: the release of the lost lease frees the lock.
	time.Sleep(500 * time.Millisecond)
	if err := lease.Release(ctx); !errors.Is(err, guard.ErrLost) {
		t.Errorf("release of the lost lease: %v, want its ErrLost", err)
	}
	next, ok := <-got
	if !ok {
		return
	}
	if next.Token() <= lease.Token() {
		t.Fatalf("token %d after the restart is not above %d", next.Token(), lease.Token())
	}
	if err := next.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The holder's locker works again.
	again, err := holder.Acquire(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if again.Token() <= next.Token() {
		t.Fatalf("token %d after %d", again.Token(), next.Token())
	}
	_ = again.Release(ctx)
}

// TTLs map onto session timeouts: one above the server's maximum is refused,
// one below its minimum still ends at its TTL when not renewed, and each
// distinct TTL costs a session, up to MaxSessions.
func TestTTLMapping(t *testing.T) {
	t.Parallel()
	z := zkserver.Shared(t)
	prefix := z.Chroot + "/locks"
	ctx := ctxFor(t, time.Minute)
	l, err := zklock.New(z.Addrs, zklock.Options{Prefix: prefix, Logger: quiet{}, MaxSessions: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	// The harness's server allows at most 60s.
	if _, err := l.Acquire(ctx, "k", 61*time.Second); !errors.Is(err, locks.ErrInvalidArgument) {
		t.Fatalf("ttl above the maximum session timeout: %v, want ErrInvalidArgument", err)
	}

	// 300ms, below the 1s minimum: the session lasts 1s, the lease 300ms.
	const short = 300 * time.Millisecond
	start := time.Now()
	first, err := l.Acquire(ctx, "k", short)
	if err != nil {
		t.Fatal(err)
	}
	next, err := l.Acquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if took < short || took > short+time.Second {
		t.Fatalf("the unrenewed %v lease held the lock for %v", short, took)
	}
	select {
	case <-first.(*zklock.Lease).Lost():
	default:
		t.Fatal("the lapsed lease is not Done")
	}
	if err := first.Renew(ctx); !errors.Is(err, locks.ErrNotHeld) {
		t.Fatalf("Renew of the lapsed lease: %v", err)
	}
	_ = next.Release(ctx)

	// Sessions so far: 300ms and 10s (the refused 61s one was closed).
	lease, err := l.TryAcquire(ctx, "k", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = lease.Release(ctx)
	if _, err := l.TryAcquire(ctx, "k", 21*time.Second); !errors.Is(err, locks.ErrInvalidArgument) {
		t.Fatalf("a fourth TTL with MaxSessions 3: %v, want ErrInvalidArgument", err)
	}
}

func TestIssuedBoundsTokens(t *testing.T) {
	t.Parallel()
	z := zkserver.Shared(t)
	l := newLocker(t, z.Addrs, z.Chroot+"/locks")
	other := newLocker(t, z.Addrs, z.Chroot+"/locks")
	ctx := ctxFor(t, time.Minute)
	if got, err := l.Issued(ctx, "never"); err != nil || got != 0 {
		t.Fatalf("Issued before any lock = %d, %v; want 0", got, err)
	}
	var toks []uint64
	for range 3 {
		lease, err := l.Acquire(ctx, "k", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, uint64(lease.Token()))
		// Asked through another session: the sync makes it see the grant.
		got, err := other.Issued(ctx, "k")
		if err != nil || uint64(got) < uint64(lease.Token()) {
			t.Fatalf("Issued = %d, %v after granting %d", got, err, lease.Token())
		}
		_ = lease.Release(ctx)
	}
	if !slices.IsSorted(toks) {
		t.Fatalf("tokens %v", toks)
	}
	got, err := l.Issued(ctx, "never")
	if err != nil || got == 0 {
		t.Fatalf("Issued for an unused key = %d, %v; want the prefix's Pzxid", got, err)
	}
	if _, err := l.Issued(ctx, ""); !errors.Is(err, locks.ErrInvalidArgument) {
		t.Fatalf("Issued of the empty key: %v", err)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		servers []string
		o       zklock.Options
	}{
		{"no servers", nil, zklock.Options{}},
		{"server without port", []string{"localhost"}, zklock.Options{}},
		{"relative prefix", []string{"127.0.0.1:2181"}, zklock.Options{Prefix: "locks"}},
		{"trailing slash", []string{"127.0.0.1:2181"}, zklock.Options{Prefix: "/locks/"}},
		{"dot component", []string{"127.0.0.1:2181"}, zklock.Options{Prefix: "/a/../b"}},
		{"negative MaxSessions", []string{"127.0.0.1:2181"}, zklock.Options{MaxSessions: -1}},
	} {
		if _, err := zklock.New(tc.servers, tc.o); !errors.Is(err, locks.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", tc.name, err)
		}
	}
}

// Close ends the leases it granted: closing a session deletes its znodes.
func TestCloseEndsLeases(t *testing.T) {
	t.Parallel()
	z := zkserver.Shared(t)
	prefix := z.Chroot + "/locks"
	l := newLocker(t, z.Addrs, prefix)
	c := inspect(t, z.Addrs)
	ctx := ctxFor(t, time.Minute)
	lease, err := l.Acquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	blocked := make(chan error, 1)
	go func() {
		_, err := l.Acquire(ctx, "k", 10*time.Second)
		blocked <- err
	}()
	eventually(t, 5*time.Second, "waiter queued", func() bool { return len(children(t, c, prefix, "k")) == 2 })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-blocked; !errors.Is(err, locks.ErrClosed) {
		t.Errorf("blocked Acquire after Close: %v, want ErrClosed", err)
	}
	select {
	case <-lease.(*zklock.Lease).Lost():
	default:
		t.Error("lease not Done after Close")
	}
	if err := lease.Release(ctx); !errors.Is(err, locks.ErrNotHeld) {
		t.Errorf("Release after Close: %v, want ErrNotHeld", err)
	}
	if q := children(t, c, prefix, "k"); len(q) != 0 {
		t.Errorf("znodes left after Close: %v", q)
	}
	if _, err := l.TryAcquire(ctx, "k", time.Second); !errors.Is(err, locks.ErrClosed) {
		t.Errorf("TryAcquire after Close: %v", err)
	}
}

func TestFenceConformance(t *testing.T) {
	t.Parallel()
	fencetest.Run(t, func(t *testing.T, check token.Check) fencetest.Subject {
		z := zkserver.Shared(t)
		f := zklock.NewFence(inspect(t, z.Addrs), zklock.FenceOptions{Prefix: z.Chroot + "/fence", Check: check, Logger: discardLog})
		return fencetest.Subject{Fence: f, HighWater: f.HighWater}
	})
}

// Any string is a resource ('/' included), and claims from several
// connections, each its own session, race on one znode's version: the final
// mark is the largest presented, and no claim is refused with a current
// below what it presented.
func TestFenceAcrossConnections(t *testing.T) {
	t.Parallel()
	z := zkserver.Shared(t)
	f := zklock.NewFence(inspect(t, z.Addrs), zklock.FenceOptions{Prefix: z.Chroot + "/fence"})
	ctx := ctxFor(t, time.Minute)
	if err := f.Claim(ctx, "r/with slash", 5); err != nil {
		t.Fatal(err)
	}
	if hw, err := f.HighWater(ctx, "r/with slash"); err != nil || hw != 5 {
		t.Fatalf("high-water of r/with slash: %d, %v", hw, err)
	}
	if hw, err := f.HighWater(ctx, "r"); err != nil || hw != 0 {
		t.Fatalf("r/with slash is not r's child: high-water of r %d, %v", hw, err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var top token.Token
	for range 4 {
		f := zklock.NewFence(inspect(t, z.Addrs), zklock.FenceOptions{Prefix: z.Chroot + "/fence"})
		wg.Go(func() {
			for range 25 {
				tok := token.Token(1 + rand.IntN(1000))
				err := f.Claim(ctx, "c", tok)
				var se *token.StaleError
				if err != nil && (!errors.As(err, &se) || se.Current <= tok) {
					t.Errorf("Claim(%d): %v", tok, err)
				}
				mu.Lock()
				top = max(top, tok)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if hw, err := f.HighWater(ctx, "c"); err != nil || hw != top {
		t.Fatalf("high-water %d, %v; want %d", hw, err, top)
	}
}

// With no server to reach, an acquire still ends with its context, and
// Close still returns.
func TestUnreachableServerHonoursContext(t *testing.T) {
	t.Parallel()
	l, err := zklock.New([]string{"127.0.0.1:1"}, zklock.Options{Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	lat := harness.StartLateness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	deadline, _ := ctx.Deadline()
	if _, err := l.Acquire(ctx, "k", time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire: %v, want DeadlineExceeded", err)
	}
	if late, allowed := time.Since(deadline), lat.Allowance(lockstest.CancelBound, deadline); late > allowed {
		t.Errorf("Acquire returned %v after its deadline, want within %v", late, allowed)
	}
	lat.Stop()
	if _, err := l.Issued(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Issued: %v, want DeadlineExceeded", err)
	}
	start := time.Now()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v", d)
	}
}

// A waiter rides out a broken connection whose session survives, even when
// its turn came while it was cut off: go-zookeeper sets its watch again on
// reconnecting, and ZooKeeper fires it for the deletion it missed.
func TestWaiterRidesOutBrokenConnection(t *testing.T) {
	t.Parallel()
	z := zkserver.Shared(t)
	prefix := z.Chroot + "/locks"
	proxy := harness.NewProxy(t, z.Addrs[0])
	waiter := newLocker(t, []string{proxy.Addr()}, prefix)
	holder := newLocker(t, z.Addrs, prefix)
	c := inspect(t, z.Addrs)
	ctx := ctxFor(t, time.Minute)
	const ttl = 8 * time.Second // the session must outlive the cut
	held, err := holder.Acquire(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var lease locks.Lease
	go func() {
		var err error
		lease, err = waiter.Acquire(ctx, "k", ttl)
		got <- err
	}()
	eventually(t, 10*time.Second, "waiter queued", func() bool { return len(children(t, c, prefix, "k")) == 2 })
	if err := proxy.Cut(); err != nil {
		t.Fatal(err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-got:
		t.Fatalf("waiter returned while cut off: %v", err)
	default:
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not granted after the connection came back")
	}
	if lease.Token() <= held.Token() {
		t.Fatalf("token %d after %d", lease.Token(), held.Token())
	}
	if q := children(t, c, prefix, "k"); len(q) != 1 || prefix+"/k/"+q[0] != lease.(*zklock.Lease).Path() {
		t.Fatalf("queue %v, want only the waiter's znode", q)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// records is a slog handler that keeps what it is handed.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r)
	return nil
}
func (h *records) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *records) WithGroup(string) slog.Handler      { return h }

// A reset leaves one Warn record naming the store, the resource and both
// marks; a refused one leaves none.
func TestFenceResetIsAudited(t *testing.T) {
	t.Parallel()
	z := zkserver.Shared(t)
	h := &records{}
	f := zklock.NewFence(inspect(t, z.Addrs), zklock.FenceOptions{Prefix: z.Chroot + "/fence", Logger: slog.New(h)})
	ctx := ctxFor(t, time.Minute)
	if err := f.Claim(ctx, "sku/1", 40); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Reset(ctx, "sku/1", 0); !errors.Is(err, token.ErrMissing) {
		t.Fatalf("Reset to 0: %v", err)
	}
	if prev, err := f.Reset(ctx, "sku/1", 12); err != nil || prev != 40 {
		t.Fatalf("Reset = %d, %v; want 40", prev, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.recs) != 1 || h.recs[0].Level != slog.LevelWarn {
		t.Fatalf("records %v, want one Warn", h.recs)
	}
	got := map[string]string{}
	h.recs[0].Attrs(func(a slog.Attr) bool { got[a.Key] = a.Value.String(); return true })
	want := map[string]string{"store": "zookeeper", "resource": "sku/1", "from": "40", "to": "12"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("record %s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
}

// Waiters queued behind a lease that expires unreleased are served in the
// order they queued once the lock-delay is over, none of them before it.
func TestLockDelayKeepsFIFOAfterExpiry(t *testing.T) {
	t.Parallel()
	z := zkserver.Shared(t)
	prefix := z.Chroot + "/locks"
	c := inspect(t, z.Addrs)
	ctx := ctxFor(t, time.Minute)
	first, err := newDelayLocker(t, z.Addrs, prefix, lockDelay).Acquire(ctx, "k", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	type served struct {
		i  int
		at time.Time
	}
	order := make(chan served, n)
	var wg sync.WaitGroup
	for i := range n {
		l := newDelayLocker(t, z.Addrs, prefix, lockDelay)
		wg.Go(func() {
			lease, err := l.Acquire(ctx, "k", 10*time.Second)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			order <- served{i, time.Now()}
			if err := lease.Release(ctx); err != nil {
				t.Errorf("waiter %d release: %v", i, err)
			}
		})
		eventually(t, 10*time.Second, "waiter queued", func() bool { return len(children(t, c, prefix, "k")) == i+2 })
	}
	bound := first.Deadline().Add(lockDelay)
	wg.Wait()
	close(order)
	want := 0
	for s := range order {
		if s.i != want {
			t.Fatalf("waiter %d was served when waiter %d's turn came", s.i, want)
		}
		if s.at.Before(bound) {
			t.Errorf("waiter %d served %v before the expired lease's Deadline plus the delay", s.i, bound.Sub(s.at))
		}
		want++
	}
}
