package redlockbench_test

// Soaks on five Redis servers of their own: one hot key granted b.N times,
// and b.N distinct keys each locked once with a fenced write (a claim of
// the key in PostgreSQL's fence_tokens, through postgres.Fence). Each
// reports the first and the last tenth of its cycles (time and the
// servers' CPU) and the state at its start and end: the nodes' used_memory
// and key count (summed), the keys under the locker's prefix, the
// fence_tokens rows and size, and this process's heap and goroutines.
// Results and the commands: docs/benchmarks.md, "Soak".
//
//	go test -run '^$' -bench 'HotKey|DistinctKeys' -benchtime 1000000x ./benchmarks/redlock

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/benchmarks/internal/lockbench"
	"github.com/fenceguard/fenceguard/benchmarks/internal/pgbench"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks/redislock/redlock"
	"github.com/fenceguard/fenceguard/storage/postgres"
)

const soakTTL = 10 * time.Second

// soakNodes starts five Redis servers and returns a client of each, a
// Locker on them and the servers' process ids.
func soakNodes(b *testing.B) ([]*redis.Client, *redlock.Locker, []int) {
	var cs []*redis.Client
	var nodes []redlock.Client
	var pids []int
	for _, s := range redisserver.NewN(b, 5) {
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
		b.Cleanup(func() { _ = c.Close() })
		cs = append(cs, c)
		nodes = append(nodes, c)
		pids = append(pids, s.PID())
	}
	return cs, newLocker(b, nodes, redlock.Options{Prefix: "lock:"}), pids
}

func BenchmarkHotKey(b *testing.B) {
	cs, l, pids := soakNodes(b)
	probes := []lockbench.Probe{lockbench.Redis(cs, map[string]string{"lock": "lock:"}), lockbench.Client}
	lockbench.SoakKeys(b, lockbench.HotCycle(l, "hot", soakTTL), probes, pids...)
}

// BenchmarkDistinctKeys: cycle i acquires key d<i>, claims resource d<i>
// in fence_tokens with the lease's token and releases. The lock keys go at
// the release; each node keeps the key's token counter for
// Options.CounterIdle (an hour) after its grant, and fence_tokens keeps a
// row per resource until Tokens.Prune.
func BenchmarkDistinctKeys(b *testing.B) {
	cs, l, pids := soakNodes(b)
	pool, pgPID := pgbench.Pool(b)
	f := postgres.NewFence(pool)
	probes := []lockbench.Probe{lockbench.Redis(cs, map[string]string{"lock": "lock:"}), lockbench.Postgres(pool, "fence_tokens"), lockbench.Client}
	lockbench.SoakKeys(b, lockbench.FencedCycle(l, soakTTL, f), probes, append(pids, pgPID)...)
}
