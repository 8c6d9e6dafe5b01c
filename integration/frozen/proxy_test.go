package frozen

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
)

// proxied is a locker reaching its server through a proxy, and one
// reaching it directly.
type proxied struct {
	name  string
	ttl   time.Duration
	start func(t *testing.T) (via, direct locks.Locker, p *harness.Proxy)
}

var proxiedBackends = []proxied{
	{"redislock", 3 * time.Second, func(t *testing.T) (locks.Locker, locks.Locker, *harness.Proxy) {
		srv := redisserver.New(t)
		p := harness.NewProxy(t, srv.Addr())
		return redisLocker(t, redisClient(t, p.Addr()), "fg:lock:"), redisLocker(t, redisClient(t, srv.Addr()), "fg:lock:"), p
	}},
	{"etcdlock", 3 * time.Second, func(t *testing.T) (locks.Locker, locks.Locker, *harness.Proxy) {
		srv := etcdserver.New(t)
		p := harness.NewProxy(t, srv.Addr())
		mk := func(addr string) locks.Locker {
			l, err := etcdlock.New(etcdClient(t, addr), etcdlock.Options{Prefix: "/fg/lock/"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return l
		}
		return mk(p.Addr()), mk(srv.Addr()), p
	}},
}

// TestGuardBlackholedKeepAlive: the keep-alive's connection blackholed
// (open, nothing answered): the lease context is cancelled by the lease's
// local deadline with a cause wrapping guard.ErrLost whose reason is
// ErrDeadline; a renewal failure is observed first.
func TestGuardBlackholedKeepAlive(t *testing.T) {
	t.Parallel()
	for _, b := range proxiedBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			via, _, p := b.start(t)
			renewFailed := make(chan struct{}, 1)
			g, err := guard.New(via, guard.Options{TTL: b.ttl, Logger: discard(), Observer: func(e guard.Event) {
				if e.Kind == guard.RenewFailed {
					select {
					case renewFailed <- struct{}{}:
					default:
					}
				}
			}})
			if err != nil {
				t.Fatal(err)
			}
			lease, err := g.Acquire(itest.Ctx(t, 10*time.Second), "bh")
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Blackhole(); err != nil {
				t.Fatal(err)
			}
			tm := itest.StartTiming(t)
			time.Sleep(20 * time.Millisecond)
			dl := lease.Deadline()
			select {
			case <-lease.Context().Done():
			case <-time.After(time.Until(dl) + 5*time.Second):
				t.Fatal("lease not lost 5s after its local deadline")
			}
			late := time.Since(dl)
			if allowed := tm.StopAt(dl, itest.Slack); late > allowed {
				t.Errorf("lost %v after the local deadline (allowed %v)", late, allowed)
			}
			cause := context.Cause(lease.Context())
			// etcdlock may learn of it from its watch (the stream ends)
			// before the deadline; either reason is a loss.
			if !errors.Is(cause, guard.ErrLost) {
				t.Errorf("cause %v, want ErrLost", cause)
			}
			if err := p.Restore(); err != nil {
				t.Fatal(err)
			}
			_ = lease.Release(itest.Ctx(t, 5*time.Second))
		})
	}
}

// TestGrantTooLateGivenBack: replies delayed past the acquire's
// deadline (the grant made on the server, its reply late): Acquire returns
// by its deadline with context.DeadlineExceeded, and the grant is given
// back — another client gets the lock long before the TTL runs out.
func TestGrantTooLateGivenBack(t *testing.T) {
	t.Parallel()
	for _, b := range proxiedBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			via, direct, p := b.start(t)
			const ttl = 20 * time.Second
			g, err := guard.New(via, guard.Options{TTL: ttl, Logger: discard()})
			if err != nil {
				t.Fatal(err)
			}
			g2, err := guard.New(direct, guard.Options{TTL: ttl, Logger: discard()})
			if err != nil {
				t.Fatal(err)
			}
			// Warm both.
			for _, gg := range []*guard.Guard{g, g2} {
				l, err := gg.Acquire(itest.Ctx(t, 10*time.Second), "warm")
				if err != nil {
					t.Fatal(err)
				}
				l.Release(itest.Ctx(t, 5*time.Second))
			}
			if err := p.Delay(400 * time.Millisecond); err != nil {
				t.Fatal(err)
			}
			byDeadline(t, "Acquire with late replies", 250*time.Millisecond, func(ctx context.Context) error {
				l, err := g.Acquire(ctx, "late")
				if err == nil {
					l.Release(context.Background())
				}
				return err
			})
			if err := p.Delay(0); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			l, err := g2.Acquire(itest.Ctx(t, 15*time.Second), "late")
			if err != nil {
				t.Fatalf("another client's Acquire: %v", err)
			}
			took := time.Since(start)
			t.Logf("another client got the lock %v after the late acquire gave up", took)
			if took > 5*time.Second {
				t.Errorf("the late grant was not given back: another client waited %v (TTL %v)", took, ttl)
			}
			l.Release(itest.Ctx(t, 5*time.Second))
		})
	}
}
