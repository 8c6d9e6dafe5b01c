package zklockbench_test

// Soaks on a ZooKeeper server of their own (the harness's configuration:
// forceSync=no, container nodes checked every minute, ZooKeeper's
// default): one hot key granted b.N times, and b.N distinct keys each
// locked once with a fenced write (a claim of the key in PostgreSQL's
// fence_tokens, through postgres.Fence). Each reports the first and the
// last tenth of its cycles (time and the servers' CPU) and the state at
// its start and end: the server's znode count (mntr), the key znodes
// under the locker's prefix, the fence_tokens rows and size, and this
// process's heap and goroutines. Results and the commands:
// docs/benchmarks.md, "Soak".
//
//	go test -run '^$' -bench 'HotKey|DistinctKeys' -benchtime 1000000x ./benchmarks/zklock

import (
	"context"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/benchmarks/internal/lockbench"
	"github.com/fenceguard/fenceguard/benchmarks/internal/pgbench"
	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/locks/zklock"
	"github.com/fenceguard/fenceguard/storage/postgres"
)

const (
	soakTTL    = 10 * time.Second
	soakPrefix = "/soak"
)

func soakServer(b *testing.B) (*zklock.Locker, lockbench.Probe, int) {
	srv := zkserver.New(b)
	l := newLocker(b, []string{srv.Addr()}, soakPrefix)
	return l, lockbench.ZooKeeper(srv.Addr(), benchConn(b, srv.Addr(), soakTTL), soakPrefix), srv.PID()
}

func BenchmarkHotKey(b *testing.B) {
	l, zkProbe, pid := soakServer(b)
	lockbench.SoakKeys(b, func(ctx context.Context, _ int) error {
		lease, err := l.Acquire(ctx, "hot", soakTTL)
		if err != nil {
			return err
		}
		return lease.Release(ctx)
	}, []lockbench.Probe{zkProbe, lockbench.Client}, pid)
}

// BenchmarkDistinctKeys: cycle i acquires key d<i>, claims resource d<i>
// in fence_tokens with the lease's token and releases. Each key leaves its
// znode, a container, until ZooKeeper's container check removes it (every
// minute, at most 10,000 a minute by default); fence_tokens keeps a row
// per resource until Tokens.Prune.
func BenchmarkDistinctKeys(b *testing.B) {
	l, zkProbe, zkPID := soakServer(b)
	pool, pgPID := pgbench.Pool(b)
	f := postgres.NewFence(pool)
	probes := []lockbench.Probe{zkProbe, lockbench.Postgres(pool, "fence_tokens"), lockbench.Client}
	lockbench.SoakKeys(b, func(ctx context.Context, i int) error {
		key := lockbench.DistinctKey(i)
		lease, err := l.Acquire(ctx, key, soakTTL)
		if err != nil {
			return err
		}
		if err := f.Claim(ctx, key, lease.Token()); err != nil {
			_ = lease.Release(ctx)
			return err
		}
		return lease.Release(ctx)
	}, probes, zkPID, pgPID)
}
