package zklockbench_test

// Many keys: 64 workers over 10,000 keys (uniform and Zipf-skewed), each
// cycle acquire → (a fenced PostgreSQL update of the key's row) → release,
// fenceguard interleaved with go-zookeeper's zk.Lock and with the server's
// own setData loop, on the harness's ZooKeeper (forceSync=no). Results:
// docs/benchmarks.md, "Many keys".

import (
	"context"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fenceguard/fenceguard/benchmarks/internal/lockbench"
	"github.com/fenceguard/fenceguard/benchmarks/internal/pgbench"
	"github.com/fenceguard/fenceguard/internal/servers"
	"github.com/fenceguard/fenceguard/token"
)

// manySessions is how many sessions (connections) each peer spreads its 64
// workers over.
const manySessions = 8

type work func(ctx context.Context, key int, t token.Token) error

func then(w work, key int, t token.Token) func(context.Context) error {
	if w == nil {
		return nil
	}
	return func(ctx context.Context) error { return w(ctx, key, t) }
}

// manyPeers returns fenceguard (8 Lockers, a session each) doing fg and
// zk.Lock (8 connections) doing peer.
func manyPeers(b *testing.B, db *servers.ZK, sub string, fg, peer work) []lockbench.KeyPeer {
	const ttl = 10 * time.Second
	fgPeer := lockbench.KeyPeer{Name: "fenceguard"}
	lockPeer := lockbench.KeyPeer{Name: "zk.Lock"}
	for range manySessions {
		l := newLocker(b, db.Addrs, db.Chroot+"/"+sub+"fg")
		if lease, err := l.TryAcquire(context.Background(), "warm", ttl); err != nil { // open the session now
			b.Fatal(err)
		} else {
			_ = lease.Release(context.Background())
		}
		fgPeer.Acquirers = append(fgPeer.Acquirers, func(ctx context.Context, key int) (func(context.Context) error, func(), error) {
			lease, err := l.Acquire(ctx, lockbench.KeyName(key), ttl)
			if err != nil {
				return nil, nil, err
			}
			return then(fg, key, lease.Token()), func() { _ = lease.Release(ctx) }, nil
		})
		c := benchConn(b, db.Addrs[0], ttl)
		lockPeer.Acquirers = append(lockPeer.Acquirers, func(ctx context.Context, key int) (func(context.Context) error, func(), error) {
			m := zk.NewLock(c, db.Chroot+"/"+sub+"zk/"+lockbench.KeyName(key), zk.WorldACL(zk.PermAll))
			if err := m.Lock(); err != nil {
				return nil, nil, err
			}
			return then(peer, key, 0), func() { _ = m.Unlock() }, nil
		})
	}
	return []lockbench.KeyPeer{fgPeer, lockPeer}
}

func pid(db *servers.ZK) int {
	if db.Server == nil {
		return 0
	}
	return db.Server.PID()
}

// BenchmarkManyKeysPG: each cycle takes the key's lock, adds one to the
// key's row — fenceguard fenced in column mode (Table.Update with the
// lease's token), zk.Lock with a plain UPDATE — and releases. References:
// fenceguard with the plain UPDATE, and the plain UPDATE alone (the
// database's ceiling). -benchtime Nx sets the rounds (each peer runs 500ms
// per round).
func BenchmarkManyKeysPG(b *testing.B) {
	pool, pgPID := pgbench.Pool(b)
	db := servers.ZooKeeper(b)
	fgRows := pgbench.NewRows(b, pool, "items_fg")
	peerRows := pgbench.NewRows(b, pool, "items_peer")
	plain := func(ctx context.Context, key int, _ token.Token) error { return peerRows.Plain(ctx, key) }
	peers := manyPeers(b, db, "", fgRows.Fenced, plain)
	unfenced := manyPeers(b, db, "u-", plain, nil)[0]
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

// BenchmarkManyKeysLock: the same cycles with nothing in the critical
// section, against the server's ceiling in the same rounds: 64 workers on
// 8 connections each looping setData on the znode of a key drawn alike. A
// lock cycle is at least two writes (create, delete).
func BenchmarkManyKeysLock(b *testing.B) {
	db := servers.ZooKeeper(b)
	peers := manyPeers(b, db, "", nil, nil)
	set := lockbench.KeyPeer{Name: "zk-setdata", Ceiling: true}
	// The bare two writes of a lock cycle: an ephemeral sequential child
	// created and deleted, nothing else.
	pair := lockbench.KeyPeer{Name: "zk-create-delete"}
	acl := zk.WorldACL(zk.PermAll)
	for i := range manySessions {
		c := benchConn(b, db.Addrs[0], 10*time.Second)
		if i == 0 {
			if _, err := c.Create(db.Chroot+"/raw", nil, 0, acl); err != nil {
				b.Fatal(err)
			}
			var ops []any
			for k := range lockbench.Keys {
				ops = append(ops, &zk.CreateRequest{Path: db.Chroot + "/raw/" + lockbench.KeyName(k), Acl: acl})
				if len(ops) == 500 || k == lockbench.Keys-1 {
					if _, err := c.Multi(ops...); err != nil {
						b.Fatal(err)
					}
					ops = ops[:0]
				}
			}
		}
		set.Acquirers = append(set.Acquirers, func(ctx context.Context, key int) (func(context.Context) error, func(), error) {
			_, err := c.Set(db.Chroot+"/raw/"+lockbench.KeyName(key), []byte("x"), -1)
			return nil, nil, err
		})
		pair.Acquirers = append(pair.Acquirers, func(ctx context.Context, key int) (func(context.Context) error, func(), error) {
			p, err := c.Create(db.Chroot+"/raw/"+lockbench.KeyName(key)+"/n-", nil, zk.FlagEphemeralSequential, acl)
			if err != nil {
				return nil, nil, err
			}
			return nil, func() { _ = c.Delete(p, -1) }, nil
		})
	}
	peers = append(peers, set, pair)
	for _, d := range []lockbench.Dist{lockbench.Uniform, lockbench.Zipf} {
		b.Run(d.Name, func(b *testing.B) { lockbench.CompareManyKeys(b, peers, d, pid(db)) })
	}
}
