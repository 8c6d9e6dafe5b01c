package zklockbench_test

// Soaks on a ZooKeeper server of their own (the harness's configuration:
// forceSync=no; container nodes checked every minute and at most 10,000
// deleted a minute, ZooKeeper's defaults; for the distinct keys a 1 GiB
// heap, the default of ZooKeeper's own scripts): one hot key granted b.N
// times, and b.N distinct keys each locked once with a fenced write (a
// claim of the key in PostgreSQL's fence_tokens, through postgres.Fence).
// Each reports the first and the last tenth of its cycles (time and the
// servers' CPU) and the state at its start and end: the server's znode
// count (mntr), the key znodes under the locker's prefix, the
// fence_tokens rows and size, and this process's heap and goroutines.
// Results and the commands: docs/benchmarks.md, "Soak".
//
//	go test -run '^$' -bench 'HotKey|DistinctKeys' -benchtime 1000000x ./benchmarks/zklock

import (
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

func soakServer(b *testing.B, o zkserver.Options) (*zklock.Locker, []lockbench.Probe, int) {
	srv := zkserver.NewWith(b, o)
	l := newLocker(b, []string{srv.Addr()}, soakPrefix)
	probes := []lockbench.Probe{
		lockbench.ZooKeeper(srv.Addr(), benchConn(b, srv.Addr(), soakTTL), soakPrefix),
		lockbench.Client,
	}
	return l, probes, srv.PID()
}

func BenchmarkHotKey(b *testing.B) {
	l, probes, pid := soakServer(b, zkserver.Options{})
	lockbench.SoakKeys(b, lockbench.HotCycle(l, "hot", soakTTL), probes, pid)
}

// BenchmarkDistinctKeys: cycle i acquires key d<i>, claims resource d<i>
// in fence_tokens with the lease's token and releases. Each key leaves its
// znode, a container, until ZooKeeper's container check removes it (every
// minute, at most 10,000 a minute by default): faster than that, they pile
// up, in the server's memory too; fence_tokens keeps a row per resource
// until Tokens.Prune.
func BenchmarkDistinctKeys(b *testing.B) {
	l, probes, zkPID := soakServer(b, zkserver.Options{HeapMiB: 1024})
	pool, pgPID := pgbench.Pool(b)
	f := postgres.NewFence(pool)
	probes = append(probes, lockbench.Postgres(pool, "fence_tokens"))
	lockbench.SoakKeys(b, lockbench.FencedCycle(l, soakTTL, f), probes, zkPID, pgPID)
}
