package zklockbench_test

// Side by side with go-zookeeper's own zk.Lock, on one standalone ZooKeeper
// 3.8 with fsync on, in the same run. Results: docs/benchmarks.md.

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fenceguard/fenceguard/benchmarks/internal/lockbench"
)

type zkPeer struct {
	name string
	// mk returns an acquirer with a session of its own.
	mk func(b *testing.B, addr, key string) lockbench.Acquirer
}

func zkPeers() []zkPeer {
	const ttl = 10 * time.Second
	return []zkPeer{
		{"zk.Lock", func(b *testing.B, addr, key string) lockbench.Acquirer {
			c := benchConn(b, addr, ttl)
			return func(context.Context) (func(), error) {
				m := zk.NewLock(c, "/bench-zk/"+key, zk.WorldACL(zk.PermAll))
				if err := m.Lock(); err != nil {
					return nil, err
				}
				return func() { _ = m.Unlock() }, nil
			}
		}},
		{"fenceguard", func(b *testing.B, addr, key string) lockbench.Acquirer {
			l := newLocker(b, []string{addr}, "/bench")
			// Open the session now, not in the timed loop (zk.Connect, above,
			// connects at once too).
			if lease, err := l.TryAcquire(context.Background(), "warm", ttl); err != nil {
				b.Fatal(err)
			} else {
				_ = lease.Release(context.Background())
			}
			return func(ctx context.Context) (func(), error) {
				lease, err := l.Acquire(ctx, key, ttl)
				if err != nil {
					return nil, err
				}
				return func() { _ = lease.Release(ctx) }, nil
			}
		}},
	}
}

// withCancel runs an acquirer with a context that can end: go-zookeeper's
// calls then run in goroutines of their own, so the acquire can return when
// the context ends. (Contended passes such a context already.)
func withCancel(acquire lockbench.Acquirer) lockbench.Acquirer {
	return func(ctx context.Context) (func(), error) {
		ctx, cancel := context.WithCancel(ctx)
		release, err := acquire(ctx)
		if err != nil {
			cancel()
			return nil, err
		}
		return func() { release(); cancel() }, nil
	}
}

func benchConn(b *testing.B, addr string, timeout time.Duration) *zk.Conn {
	return benchConnVia(b, addr, timeout, net.DialTimeout)
}

func benchConnVia(b *testing.B, addr string, timeout time.Duration, dial zk.Dialer) *zk.Conn {
	c, events, err := zk.Connect([]string{addr}, timeout, zk.WithLogger(quiet{}), zk.WithDialer(dial))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		c.Close()
		for range events {
		}
	})
	return c
}

// One goroutine: acquire, release, again. Also the bare round trips: a read
// and a synced write.
func BenchmarkUncontended(b *testing.B) {
	addr := benchServer(b)
	c := benchConn(b, addr, 10*time.Second)
	if _, err := c.Create("/bench-raw", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		b.Fatal(err)
	}
	b.Run("zk-exists", func(b *testing.B) {
		lockbench.Uncontended(b, func(context.Context) (func(), error) {
			_, _, err := c.Exists("/bench-raw")
			return func() {}, err
		})
	})
	b.Run("zk-set", func(b *testing.B) {
		lockbench.Uncontended(b, func(context.Context) (func(), error) {
			_, err := c.Set("/bench-raw", nil, -1)
			return func() {}, err
		})
	})
	for _, p := range zkPeers() {
		b.Run(p.name, func(b *testing.B) {
			lockbench.Uncontended(b, p.mk(b, addr, "uncontended"))
		})
	}
	b.Run("fenceguard-cancelable-ctx", func(b *testing.B) {
		lockbench.Uncontended(b, withCancel(zkPeers()[1].mk(b, addr, "uncontended")))
	})
}

// Eight sessions (connections of their own) on one key, 200µs critical
// sections.
func BenchmarkContended8(b *testing.B) {
	addr := benchServer(b)
	for _, p := range zkPeers() {
		b.Run(p.name, func(b *testing.B) {
			acquirers := make([]lockbench.Acquirer, 8)
			for i := range acquirers {
				acquirers[i] = p.mk(b, addr, "contended")
			}
			lockbench.Contended(b, acquirers, 200*time.Microsecond)
		})
	}
}

// BenchmarkCompare runs the peers interleaved (see lockbench), so a noisy
// machine moves both alike: one round is 50 uncontended cycles, or 100
// critical sections by 8 sessions on one key, per peer. -benchtime Nx sets
// the rounds.
func BenchmarkCompare(b *testing.B) {
	addr := benchServer(b)
	mk := func(clients int) []lockbench.Peer {
		var out []lockbench.Peer
		for _, p := range zkPeers() {
			peer := lockbench.Peer{Name: p.name}
			for range clients {
				peer.Acquirers = append(peer.Acquirers, p.mk(b, addr, fmt.Sprintf("cmp-%d", clients)))
			}
			out = append(out, peer)
		}
		return out
	}
	b.Run("uncontended", func(b *testing.B) {
		c := benchConn(b, addr, 10*time.Second)
		if _, err := c.Create("/bench-cmp-set", nil, 0, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
			b.Fatal(err)
		}
		set := lockbench.Peer{Name: "zk-set", Acquirers: []lockbench.Acquirer{func(context.Context) (func(), error) {
			_, err := c.Set("/bench-cmp-set", nil, -1)
			return func() {}, err
		}}}
		lockbench.CompareUncontended(b, append(mk(1), set), 50)
	})
	b.Run("contended8", func(b *testing.B) {
		lockbench.CompareContended(b, mk(8), 200*time.Microsecond, 100)
	})
}
