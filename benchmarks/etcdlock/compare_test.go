package etcdlockbench_test

// Side by side with etcd's own concurrency.Mutex, on one in-process etcd 3.7
// with fsync on. Results: docs/benchmarks.md.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fenceguard/fenceguard/benchmarks/internal/lockbench"
	"github.com/fenceguard/fenceguard/harness/etcdembed"
)

func benchServer(b *testing.B) []string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := etcdembed.Start(ctx, etcdembed.Options{}) // fsync on
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s.Endpoints()
}

type etcdPeer struct {
	name string
	// mk returns an acquirer for one client of its own.
	mk func(b *testing.B, eps []string, key string) lockbench.Acquirer
}

func etcdPeers() []etcdPeer {
	const ttl = 10 * time.Second
	return []etcdPeer{
		{"fenceguard", func(b *testing.B, eps []string, key string) lockbench.Acquirer {
			l := newLocker(b, newClient(b, eps), "/bench/")
			return func(ctx context.Context) (func(), error) {
				lease, err := l.Acquire(ctx, key, ttl)
				if err != nil {
					return nil, err
				}
				return func() { _ = lease.Release(ctx) }, nil
			}
		}},
		{"concurrency.Mutex", func(b *testing.B, eps []string, key string) lockbench.Acquirer {
			c := newClient(b, eps)
			s, err := concurrency.NewSession(c, concurrency.WithTTL(int(ttl/time.Second)))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			return func(ctx context.Context) (func(), error) {
				m := concurrency.NewMutex(s, "/bench/mutex/"+key)
				if err := m.Lock(ctx); err != nil {
					return nil, err
				}
				return func() { _ = m.Unlock(ctx) }, nil
			}
		}},
	}
}

// BenchmarkCompare runs the peers interleaved (see lockbench): one round is
// 50 uncontended cycles, or 100 critical sections by 8 clients on one key,
// per peer. -benchtime Nx sets the rounds.
func BenchmarkCompare(b *testing.B) {
	eps := benchServer(b)
	mk := func(clients int) []lockbench.Peer {
		var out []lockbench.Peer
		for _, p := range etcdPeers() {
			peer := lockbench.Peer{Name: p.name}
			for range clients {
				peer.Acquirers = append(peer.Acquirers, p.mk(b, eps, fmt.Sprintf("cmp-%d", clients)))
			}
			out = append(out, peer)
		}
		return out
	}
	b.Run("uncontended", func(b *testing.B) {
		c := newClient(b, eps)
		put := lockbench.Peer{Name: "etcd-put", Acquirers: []lockbench.Acquirer{func(ctx context.Context) (func(), error) {
			_, err := c.Put(ctx, "/bench/put", "x")
			return func() {}, err
		}}}
		lockbench.CompareUncontended(b, append(mk(1), put), 50)
	})
	b.Run("contended8", func(b *testing.B) {
		lockbench.CompareContended(b, mk(8), 200*time.Microsecond, 100)
	})
}
