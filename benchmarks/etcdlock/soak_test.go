package etcdlockbench_test

// A hot key over a long run: one goroutine acquires and releases one key
// b.N times on an etcd 3.4 of its own with etcd's default configuration
// (no auto-compaction), fenceguard and concurrency.Mutex (one session, the
// same loop) each on a fresh server. What is compared is a peer's last
// tenth of grants with its own first tenth: the cost of a key's history.
// Results and the command: docs/benchmarks.md, "Soak".
//
//	go test -run '^$' -bench HotKey -benchtime 1000000x ./benchmarks/etcdlock

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fenceguard/fenceguard/benchmarks/internal/lockbench"
	"github.com/fenceguard/fenceguard/harness/etcdserver"
)

func BenchmarkHotKey(b *testing.B) {
	const ttl = 10 * time.Second
	b.Run("fenceguard", func(b *testing.B) {
		srv := etcdserver.New(b)
		c := newClient(b, []string{srv.Addr()})
		l := newLocker(b, c, "/bench/")
		lockbench.Soak(b, func(ctx context.Context, _ int) error {
			lease, err := l.Acquire(ctx, "hot", ttl)
			if err != nil {
				return err
			}
			return lease.Release(ctx)
		}, srv.PID())
		reportIndex(b, c, srv.Addr())
	})
	b.Run("concurrency.Mutex", func(b *testing.B) {
		srv := etcdserver.New(b)
		c := newClient(b, []string{srv.Addr()})
		s, err := concurrency.NewSession(c, concurrency.WithTTL(int(ttl/time.Second)))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		m := concurrency.NewMutex(s, "/bench/hot")
		lockbench.Soak(b, func(ctx context.Context, _ int) error {
			if err := m.Lock(ctx); err != nil {
				return err
			}
			return m.Unlock(ctx)
		}, srv.PID())
		reportIndex(b, c, srv.Addr())
	})
}

// reportIndex reports the server's database size at the end (every
// revision is kept until a compaction, which etcd's default configuration
// never runs: it grows with every write, whoever writes).
func reportIndex(b *testing.B, c *clientv3.Client, addr string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.Status(ctx, addr)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(st.DbSize)/(1<<20), "db-MiB")
}
