package etcdlock_test

// Side by side with etcd's own concurrency.Mutex, on one in-process etcd 3.7
// with fsync on. Results: docs/benchmarks.md.

import (
	"context"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fenceguard/fenceguard/integration/servers/embedetcd"
	"github.com/fenceguard/fenceguard/internal/lockbench"
)

func benchServer(b *testing.B) []string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := embedetcd.Start(ctx, embedetcd.Options{}) // fsync on
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

func BenchmarkUncontended(b *testing.B) {
	eps := benchServer(b)
	b.Run("etcd-put", func(b *testing.B) {
		c := newClient(b, eps)
		lockbench.Uncontended(b, func(ctx context.Context) (func(), error) {
			_, err := c.Put(ctx, "/bench/put", "x")
			return func() {}, err
		})
	})
	for _, p := range etcdPeers() {
		b.Run(p.name, func(b *testing.B) {
			lockbench.Uncontended(b, p.mk(b, eps, "uncontended"))
		})
	}
}

// Eight clients (connections of their own) on one key, 200µs critical
// sections.
func BenchmarkContended8(b *testing.B) {
	eps := benchServer(b)
	for _, p := range etcdPeers() {
		b.Run(p.name, func(b *testing.B) {
			acquirers := make([]lockbench.Acquirer, 8)
			for i := range acquirers {
				acquirers[i] = p.mk(b, eps, "contended")
			}
			lockbench.Contended(b, acquirers, 200*time.Microsecond)
		})
	}
}
