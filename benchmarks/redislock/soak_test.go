package redislockbench_test

// Soaks on a Redis server of their own: one hot key granted b.N times, and
// b.N distinct keys each locked once with a fenced write (a redislock.Fence
// claim of the key, on the same server). Each reports the first and the
// last tenth of its cycles (time and server CPU) and the state at its
// start and end: the server's used_memory and key count, the keys under
// the locker's and the fence's prefixes, and this process's heap and
// goroutines. Results and the commands: docs/benchmarks.md, "Soak".
//
//	go test -run '^$' -bench 'HotKey|DistinctKeys' -benchtime 1000000x ./benchmarks/redislock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/benchmarks/internal/lockbench"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks/redislock"
)

const soakTTL = 10 * time.Second

func soakClient(b *testing.B, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	b.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
	return c
}

func BenchmarkHotKey(b *testing.B) {
	srv := redisserver.New(b)
	c := soakClient(b, srv.Addr())
	l := newLocker(b, c, redislock.Options{Prefix: "lock:"})
	probes := []lockbench.Probe{lockbench.Redis([]*redis.Client{c}, map[string]string{"lock": "lock:"}), lockbench.Client}
	lockbench.SoakKeys(b, lockbench.HotCycle(l, "hot", soakTTL), probes, srv.PID())
}

// BenchmarkDistinctKeys: cycle i acquires key d<i>, claims the fence of
// resource d<i> with the lease's token and releases. The lock keys go at
// the release; each key's token counter stays for Options.CounterIdle
// (an hour) after its grant, and the fence keeps a mark per resource for
// good: both grow with the keys of the last hour.
func BenchmarkDistinctKeys(b *testing.B) {
	srv := redisserver.New(b)
	c := soakClient(b, srv.Addr())
	l := newLocker(b, c, redislock.Options{Prefix: "lock:"})
	f := redislock.NewFence(c, redislock.FenceOptions{Prefix: "fence:"})
	probes := []lockbench.Probe{lockbench.Redis([]*redis.Client{c}, map[string]string{"lock": "lock:", "fence": "fence:"}), lockbench.Client}
	lockbench.SoakKeys(b, lockbench.FencedCycle(l, soakTTL, f), probes, srv.PID())
}
