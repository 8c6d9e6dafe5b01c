package zklock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/lockstest"
	"github.com/fenceguard/fenceguard/locks/zklock"
	"github.com/fenceguard/fenceguard/token"
)

// The conformance suite on a 3-member ensemble, the locker given every
// member (go-zookeeper picks one and moves on a break).
func TestEnsembleConformance(t *testing.T) {
	t.Parallel()
	e := zkserver.NewEnsemble(t, 3)
	n := 0
	prefixes := map[locks.Locker]string{}
	lockstest.Run(t, lockstest.Config{
		NewLocker: func(t *testing.T) locks.Locker {
			n++
			prefix := fmt.Sprintf("/conf%d/locks", n)
			l := newLocker(t, e.Addrs(), prefix)
			prefixes[l] = prefix
			return l
		},
		// As a resource builds it: a session of its own, on any member
		// (the Sequencer syncs before it reads).
		NewSequencer: func(t *testing.T, l locks.Locker) token.Sequencer {
			return zklock.NewSequencer(inspect(t, e.Addrs()), prefixes[l])
		},
		ShortTTL: 2 * time.Second, // as in TestConformance
		LongTTL:  30 * time.Second,
		Unreachable: func(t *testing.T) (locks.Locker, func()) {
			n++
			p := harness.NewProxy(t, e.Members[n%3].Addr())
			return newLocker(t, []string{p.Addr()}, fmt.Sprintf("/conf%d/locks", n)), func() { _ = p.Cut() }
		},
	})
}

// holders checks a history of grants as they happen: tokens grow, and a
// grant comes only when every earlier live lease has been told it is lost
// (Lost closed) or is past its deadline.
type holders struct {
	mu   sync.Mutex
	live map[locks.Lease]string
	last token.Token
	n    int
	bad  []string
}

func lost(l locks.Lease) bool {
	select {
	case <-l.(locks.LossNotifier).Lost():
		return true
	default:
		return false
	}
}

func (h *holders) granted(who string, l locks.Lease) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.live == nil {
		h.live = map[locks.Lease]string{}
	}
	h.n++
	if l.Token() <= h.last {
		h.bad = append(h.bad, fmt.Sprintf("%s granted token %d, not above %d", who, l.Token(), h.last))
	}
	h.last = max(h.last, l.Token())
	for o, owho := range h.live {
		if !lost(o) && time.Now().Before(o.Deadline()) {
			h.bad = append(h.bad, fmt.Sprintf("%s granted token %d while %s (token %d) still holds, not told it lost", who, l.Token(), owho, o.Token()))
		}
	}
	h.live[l] = who
}

// done forgets l, before its Release is sent.
func (h *holders) done(l locks.Lease) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.live, l)
}

func (h *holders) check(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, b := range h.bad {
		t.Error(b)
	}
}

// waiter queues for key on its own locker and, once granted, holds the
// lock for a moment and releases it.
func waiter(ctx context.Context, l *zklock.Locker, h *holders, who, key string, ttl time.Duration) error {
	lease, err := l.Acquire(ctx, key, ttl)
	if err != nil {
		return fmt.Errorf("%s: Acquire: %w", who, err)
	}
	h.granted(who, lease)
	time.Sleep(100 * time.Millisecond)
	h.done(lease)
	_ = lease.Release(ctx) // may say it was lost: that is reported already
	return nil
}

// The leader is killed while the lock is held and two waiters queue. Every
// client's connection breaks (followers drop their clients while they
// elect), the sessions move to the members left once a leader is elected.
// The holder's lease is reported lost (or keeps working, if its
// connection survived); the waiters get the lock in turn; tokens grow; no
// two holders at once unless the older was told it lost.
func TestEnsembleLeaderKilledWhileHeldAndQueued(t *testing.T) {
	t.Parallel()
	e := zkserver.NewEnsemble(t, 3)
	ctx := ctxFor(t, 2*time.Minute)
	const ttl = 8 * time.Second // sessions outlive an election on a loaded machine
	prefix := "/killed/locks"
	var h holders
	hl := newLocker(t, e.Addrs(), prefix)
	held, err := hl.Acquire(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	h.granted("holder", held)
	errs := make(chan error, 2)
	for i := range 2 {
		wl := newLocker(t, e.Addrs(), prefix)
		go func() { errs <- waiter(ctx, wl, &h, fmt.Sprintf("waiter%d", i+1), "k", ttl) }()
	}
	c := inspect(t, e.Addrs())
	eventually(t, 30*time.Second, "two waiters queued", func() bool { return len(children(t, c, prefix, "k")) == 3 })

	leader, _, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Leader(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("new leader elected %v after the kill", time.Since(killed).Round(time.Millisecond))
	// The holder: lost, or still renewing.
	renewErr := held.Renew(ctx)
	switch {
	case lost(held):
		if !errors.Is(renewErr, locks.ErrNotHeld) {
			t.Errorf("Renew of the lost lease = %v, want ErrNotHeld", renewErr)
		}
		t.Logf("holder's lease reported lost (%v)", renewErr)
	case renewErr == nil:
		t.Log("holder's lease survived the election")
	default:
		t.Errorf("Renew = %v, but the lease is not reported lost", renewErr)
	}
	h.done(held)
	_ = held.Release(ctx)
	for range 2 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	// Later grants' tokens are above every earlier one.
	next, err := newLocker(t, e.Addrs(), prefix).Acquire(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	h.granted("after", next)
	h.done(next)
	_ = next.Release(ctx)
	h.check(t)
	if h.n != 4 {
		t.Errorf("%d grants, want 4", h.n)
	}
}

// A holder's member is partitioned from it (a proxy between them, cut).
// With another member in its list the session moves there; with none it
// expires. Either way the lease is reported lost at the break, and a
// waiter on the other members gets the lock only after that, with a larger
// token.
func TestEnsembleMemberPartitioned(t *testing.T) {
	t.Parallel()
	e := zkserver.NewEnsemble(t, 3)
	for _, moves := range []bool{true, false} {
		t.Run(fmt.Sprintf("moves=%v", moves), func(t *testing.T) {
			ctx := ctxFor(t, time.Minute)
			const ttl = 4 * time.Second
			prefix := fmt.Sprintf("/part-%v/locks", moves)
			proxies := map[string]*harness.Proxy{}
			addrs := []string{}
			for _, m := range e.Members[:2] {
				p := harness.NewProxy(t, m.Addr())
				proxies[p.Addr()] = p
				addrs = append(addrs, p.Addr())
			}
			if !moves {
				addrs = addrs[:1]
			}
			var dialed atomic.Pointer[string]
			l, err := zklock.New(addrs, zklock.Options{Prefix: prefix, Logger: quiet{}, Dialer: func(network, addr string, timeout time.Duration) (net.Conn, error) {
				dialed.Store(&addr)
				return net.DialTimeout(network, addr, timeout)
			}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			var h holders
			held, err := l.Acquire(ctx, "k", ttl)
			if err != nil {
				t.Fatal(err)
			}
			h.granted("holder", held)
			errs := make(chan error, 1)
			go func() { errs <- waiter(ctx, newLocker(t, e.Addrs(), prefix), &h, "waiter", "k", ttl) }()
			c := inspect(t, e.Addrs())
			eventually(t, 30*time.Second, "the waiter queued", func() bool { return len(children(t, c, prefix, "k")) == 2 })

			on := *dialed.Load()
			cut := time.Now()
			if err := proxies[on].Cut(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-held.(locks.LossNotifier).Lost():
				t.Logf("lease reported lost %v after the cut", time.Since(cut).Round(time.Millisecond))
			case <-time.After(ttl):
				t.Fatalf("lease not reported lost %v after its member was cut off", ttl)
			}
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
			t.Logf("the waiter got the lock %v after the cut", time.Since(cut).Round(time.Millisecond))
			if moves {
				eventually(t, 30*time.Second, "the session moved", func() bool { return *dialed.Load() != on })
			}
			if err := held.Renew(ctx); !errors.Is(err, locks.ErrNotHeld) {
				t.Errorf("Renew after the partition = %v, want ErrNotHeld", err)
			}
			h.done(held)
			_ = held.Release(ctx)
			h.check(t)
		})
	}
}
