package etcdlockbench_test

// Distinct keys over a long run: one goroutine acquires b.N distinct keys
// once each on an etcd 3.4 of its own (etcd's default configuration: no
// auto-compaction), with a fenced write on each (a claim of the key in
// PostgreSQL's fence_tokens, through postgres.Fence). It reports the first
// and the last tenth of its cycles (time and the servers' CPU) and the
// state at its start and end: the live keys under the locker's prefix,
// the server's revision (every revision is kept until a compaction, which
// etcd's default configuration never runs), the database size, the
// server's resident memory, the fence_tokens rows and size, and this
// process's heap and goroutines. Results and the command:
// docs/benchmarks.md, "Soak".
//
//	go test -run '^$' -bench DistinctKeys -benchtime 1000000x ./benchmarks/etcdlock

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceguard/fenceguard/benchmarks/internal/lockbench"
	"github.com/fenceguard/fenceguard/benchmarks/internal/pgbench"
	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/storage/postgres"
)

func BenchmarkDistinctKeys(b *testing.B) {
	const ttl = 10 * time.Second
	srv := etcdserver.New(b)
	c := newClient(b, []string{srv.Addr()})
	l := newLocker(b, c, "/lock/")
	pool, pgPID := pgbench.Pool(b)
	f := postgres.NewFence(pool)
	probes := []lockbench.Probe{etcdState(c, srv.Addr(), "/lock/"), lockbench.ServerRSS(srv.PID()), lockbench.Postgres(pool, "fence_tokens"), lockbench.Client}
	lockbench.SoakKeys(b, lockbench.FencedCycle(l, ttl, f), probes, srv.PID(), pgPID)
}

// etcdState reports the live keys under prefix (lock-keys), the server's
// revision (revisions), and the database size (db-MiB) and the part of it
// in use (db-inuse-MiB).
func etcdState(c *clientv3.Client, addr, prefix string) lockbench.Probe {
	return func(ctx context.Context) (map[string]float64, error) {
		live, err := c.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return nil, err
		}
		st, err := c.Status(ctx, addr)
		if err != nil {
			return nil, err
		}
		return map[string]float64{
			"lock-keys":    float64(live.Count),
			"revisions":    float64(st.Header.Revision),
			"db-MiB":       float64(st.DbSize) / (1 << 20),
			"db-inuse-MiB": float64(st.DbSizeInUse) / (1 << 20),
		}, nil
	}
}
