package redislockbench_test

// Many keys: 64 workers over 10,000 keys (uniform and Zipf-skewed), each
// cycle acquire → (a fenced PostgreSQL update of the key's row) → release,
// fenceguard interleaved with its peers and with the server's own ceiling.
// Results: docs/benchmarks.md, "Many keys".

import (
	"context"
	"math"
	"testing"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/benchmarks/internal/lockbench"
	"github.com/fenceguard/fenceguard/benchmarks/internal/pgbench"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/token"
)

// work is the critical section: nil for lock only, else the row's update
// under the lease's token (zero for the peers, which have none).
type work func(ctx context.Context, key int, t token.Token) error

// manyClient is a client of its own for one peer, its pool big enough that
// no worker waits for a connection.
func manyClient(b *testing.B, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: lockbench.Workers + 8, MinIdleConns: lockbench.Workers})
	b.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
	return c
}

func then(w work, key int, t token.Token) func(context.Context) error {
	if w == nil {
		return nil
	}
	return func(ctx context.Context) error { return w(ctx, key, t) }
}

// manyPeers returns fenceguard's redislock doing fg, and the peers doing
// peer, each with a client of its own.
func manyPeers(b *testing.B, addr, prefix string, fg, peer work) []lockbench.KeyPeer {
	const ttl = 10 * time.Second
	l := newLocker(b, manyClient(b, addr), redislock.Options{Prefix: prefix + "fg:"})
	bl := bsm.New(manyClient(b, addr))
	bopt := &bsm.Options{RetryStrategy: bsm.LinearBackoff(time.Millisecond)}
	rs := redsync.New(goredis.NewPool(manyClient(b, addr)))
	rs1 := redsync.New(goredis.NewPool(manyClient(b, addr)))
	redsyncPeer := func(rs *redsync.Redsync, opts ...redsync.Option) lockbench.KeyAcquirer {
		opts = append(opts, redsync.WithExpiry(ttl), redsync.WithTries(math.MaxInt32))
		return func(ctx context.Context, key int) (func(context.Context) error, func(), error) {
			m := rs.NewMutex(prefix+"rs:"+lockbench.KeyName(key), opts...)
			if err := m.LockContext(ctx); err != nil {
				return nil, nil, err
			}
			return then(peer, key, 0), func() { _, _ = m.UnlockContext(ctx) }, nil
		}
	}
	return []lockbench.KeyPeer{
		{Name: "fenceguard", Acquirers: []lockbench.KeyAcquirer{func(ctx context.Context, key int) (func(context.Context) error, func(), error) {
			lease, err := l.Acquire(ctx, lockbench.KeyName(key), ttl)
			if err != nil {
				return nil, nil, err
			}
			return then(fg, key, lease.Token()), func() { _ = lease.Release(ctx) }, nil
		}}},
		{Name: "bsm-redislock", Acquirers: []lockbench.KeyAcquirer{func(ctx context.Context, key int) (func(context.Context) error, func(), error) {
			lock, err := bl.Obtain(ctx, prefix+"bsm:"+lockbench.KeyName(key), ttl, bopt)
			if err != nil {
				return nil, nil, err
			}
			return then(peer, key, 0), func() { _ = lock.Release(ctx) }, nil
		}}},
		{Name: "redsync-1ms", Acquirers: []lockbench.KeyAcquirer{redsyncPeer(rs1, redsync.WithRetryDelay(time.Millisecond))}},
		{Name: "redsync-default", Acquirers: []lockbench.KeyAcquirer{redsyncPeer(rs)}},
	}
}

// BenchmarkManyKeysPG: each cycle takes the key's lock, adds one to the
// key's row — fenceguard fenced in column mode (Table.Update with the
// lease's token), the peers with a plain UPDATE — and releases. References:
// fenceguard with the plain UPDATE (what the fencing costs), and the plain
// UPDATE alone with no lock (the database's ceiling). -benchtime Nx sets
// the rounds (each peer runs 500ms per round).
func BenchmarkManyKeysPG(b *testing.B) {
	pool, pgPID := pgbench.Pool(b)
	db := redisserver.Shared(b)
	fgRows := pgbench.NewRows(b, pool, "items_fg")
	peerRows := pgbench.NewRows(b, pool, "items_peer")
	plain := func(ctx context.Context, key int, _ token.Token) error { return peerRows.Plain(ctx, key) }
	peers := manyPeers(b, db.Addr, db.Prefix, fgRows.Fenced, plain)
	unfenced := manyPeers(b, db.Addr, db.Prefix+"u:", plain, nil)[0]
	unfenced.Name = "fenceguard-unfenced"
	ceiling := lockbench.KeyPeer{Name: "pg-only", Ceiling: true, Acquirers: []lockbench.KeyAcquirer{
		func(ctx context.Context, key int) (func(context.Context) error, func(), error) {
			return nil, nil, peerRows.Plain(ctx, key)
		}}}
	peers = append(peers, unfenced, ceiling)
	for _, d := range []lockbench.Dist{lockbench.Uniform, lockbench.Zipf} {
		b.Run(d.Name, func(b *testing.B) { lockbench.CompareManyKeys(b, peers, d, pid(db), pgPID) })
	}
}

// ceilingScript is one write, as a script like the lockers' own: the
// server's ceiling for single-write requests.
var ceilingScript = redis.NewScript(`return redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])`)

// BenchmarkManyKeysLock: the same cycles with nothing in the critical
// section, against the server's own ceiling measured in the same rounds:
// 64 workers each looping EVALSHA of a one-SET script on keys drawn alike.
// A lock cycle is two writes (acquire, release): 0.5 of the ceiling is a
// cycle as cheap as two bare writes.
func BenchmarkManyKeysLock(b *testing.B) {
	db := redisserver.Shared(b)
	peers := manyPeers(b, db.Addr, db.Prefix, nil, nil)
	c := manyClient(b, db.Addr)
	if err := ceilingScript.Load(context.Background(), c).Err(); err != nil {
		b.Fatal(err)
	}
	peers = append(peers, lockbench.KeyPeer{Name: "redis-evalsha", Ceiling: true, Acquirers: []lockbench.KeyAcquirer{
		func(ctx context.Context, key int) (func(context.Context) error, func(), error) {
			return nil, nil, ceilingScript.EvalSha(ctx, c, []string{db.Prefix + "raw:" + lockbench.KeyName(key)}, "x", 10000).Err()
		}}},
		// The bare two writes of a lock cycle, no script, no retry (a
		// taken key is a failed cycle, retried with another key).
		lockbench.KeyPeer{Name: "redis-set-del", Acquirers: []lockbench.KeyAcquirer{
			func(ctx context.Context, key int) (func(context.Context) error, func(), error) {
				k := db.Prefix + "pair:" + lockbench.KeyName(key)
				ok, err := c.SetNX(ctx, k, "x", 10*time.Second).Result()
				if err == nil && !ok {
					err = lockbench.ErrBusy
				}
				if err != nil {
					return nil, nil, err
				}
				return nil, func() { _ = c.Del(ctx, k).Err() }, nil
			}}})
	for _, d := range []lockbench.Dist{lockbench.Uniform, lockbench.Zipf} {
		b.Run(d.Name, func(b *testing.B) { lockbench.CompareManyKeys(b, peers, d, pid(db)) })
	}
}

// pid is the server's process id, 0 when the harness did not start it.
func pid(db *redisserver.DB) int {
	if db.Server == nil {
		return 0
	}
	return db.Server.PID()
}
