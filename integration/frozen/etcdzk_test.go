package frozen

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
	"github.com/fenceguard/fenceguard/locks/zklock"
	"github.com/fenceguard/fenceguard/token"
)

// TestEtcdZKCallsFrozen: etcdlock's and zklock's public calls that do
// not hold a lease — Sequencer.Current, Locker.Issued, the Fence's Claim,
// HighWater and Reset, Acquire and TryAcquire — and a held lease's Renew
// and Release, with the server frozen: each returns by its deadline with an
// error matching context.DeadlineExceeded (context.Canceled when
// cancelled); after the thaw the mark is one a claim presented.
func TestEtcdZKCallsFrozen(t *testing.T) {
	t.Parallel()
	type target struct {
		name  string
		calls func(t *testing.T) (map[string]func(context.Context) error, *harness.Server, func(t *testing.T))
	}
	targets := []target{
		{"etcd", func(t *testing.T) (map[string]func(context.Context) error, *harness.Server, func(t *testing.T)) {
			srv := etcdserver.New(t)
			c := etcdClient(t, srv.Addr())
			l, err := etcdlock.New(c, etcdlock.Options{Prefix: "/fg/lock/"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			seq := etcdlock.NewSequencer(c, "/fg/lock/")
			f := etcdlock.NewFence(c, etcdlock.FenceOptions{Check: token.NoCheck()})
			ctx := itest.Ctx(t, 10*time.Second)
			lease, err := l.Acquire(ctx, "held", 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Claim(ctx, "res", lease.Token()); err != nil {
				t.Fatal(err)
			}
			tok := lease.Token()
			return map[string]func(context.Context) error{
					"Sequencer.Current": func(ctx context.Context) error { _, err := seq.Current(ctx, "held"); return err },
					"Locker.Issued":     func(ctx context.Context) error { _, err := l.Issued(ctx, "held"); return err },
					"Fence.Claim":       func(ctx context.Context) error { return f.Claim(ctx, "res", tok+1) },
					"Fence.HighWater":   func(ctx context.Context) error { _, err := f.HighWater(ctx, "res"); return err },
					"Fence.Reset":       func(ctx context.Context) error { _, err := f.Reset(ctx, "res2", 3); return err },
					"Locker.TryAcquire": func(ctx context.Context) error { _, err := l.TryAcquire(ctx, "free", 5*time.Second); return err },
					"Locker.Acquire":    func(ctx context.Context) error { _, err := l.Acquire(ctx, "held", 5*time.Second); return err },
					"Lease.Renew":       lease.Renew,
				}, srv, func(t *testing.T) {
					// A claim the frozen server had buffered runs at the thaw
					// (a call cut short has an unknown outcome): tok or the
					// tok+1 every cut claim presented, nothing else.
					if hw, err := f.HighWater(itest.Ctx(t, 10*time.Second), "res"); err != nil || (hw != tok && hw != tok+1) {
						t.Errorf("mark after the thaw %d (%v), want %d or %d", hw, err, tok, tok+1)
					}
					if err := lease.Release(itest.Ctx(t, 10*time.Second)); err != nil {
						t.Errorf("release after the thaw: %v", err)
					}
				}
		}},
		{"zookeeper", func(t *testing.T) (map[string]func(context.Context) error, *harness.Server, func(t *testing.T)) {
			srv := zkserver.New(t)
			l, err := zklock.New([]string{srv.Addr()}, zklock.Options{Prefix: "/fg/lock", Logger: itest.QuietZK{}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			conn := zkConn(t, srv.Addr())
			seq := zklock.NewSequencer(conn, "/fg/lock")
			f := zklock.NewFence(conn, zklock.FenceOptions{Check: token.NoCheck()})
			ctx := itest.Ctx(t, 10*time.Second)
			lease, err := l.Acquire(ctx, "held", 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Claim(ctx, "res", lease.Token()); err != nil {
				t.Fatal(err)
			}
			tok := lease.Token()
			return map[string]func(context.Context) error{
					"Sequencer.Current": func(ctx context.Context) error { _, err := seq.Current(ctx, "held"); return err },
					"Locker.Issued":     func(ctx context.Context) error { _, err := l.Issued(ctx, "held"); return err },
					"Fence.Claim":       func(ctx context.Context) error { return f.Claim(ctx, "res", tok+1) },
					"Fence.HighWater":   func(ctx context.Context) error { _, err := f.HighWater(ctx, "res"); return err },
					"Fence.Reset":       func(ctx context.Context) error { _, err := f.Reset(ctx, "res2", 3); return err },
					"Locker.TryAcquire": func(ctx context.Context) error { _, err := l.TryAcquire(ctx, "free", 30*time.Second); return err },
					"Locker.Acquire":    func(ctx context.Context) error { _, err := l.Acquire(ctx, "held", 30*time.Second); return err },
				}, srv, func(t *testing.T) {
					deadline := time.Now().Add(15 * time.Second)
					for {
						hw, err := f.HighWater(itest.Ctx(t, 5*time.Second), "res")
						if err == nil {
							if hw != tok && hw != tok+1 {
								t.Errorf("mark after the thaw %d, want %d or %d", hw, tok, tok+1)
							}
							break
						}
						if time.Now().After(deadline) {
							t.Fatalf("HighWater after the thaw: %v", err)
						}
						time.Sleep(100 * time.Millisecond)
					}
				}
		}},
	}
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			calls, srv, after := tg.calls(t)
			itest.Pause(t, srv)
			for name, call := range calls {
				for _, d := range []time.Duration{30 * time.Millisecond, 300 * time.Millisecond} {
					byDeadline(t, fmt.Sprintf("%s %s (deadline %v)", tg.name, name, d), d, call)
				}
				byCancel(t, fmt.Sprintf("%s %s (cancelled)", tg.name, name), 100*time.Millisecond, call)
			}
			itest.Resume(t, srv)
			after(t)
		})
	}
}
