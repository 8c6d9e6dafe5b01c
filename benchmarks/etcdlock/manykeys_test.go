package etcdlockbench_test

// Many keys: 64 workers over 10,000 keys (uniform and Zipf-skewed), each
// cycle acquire → (a fenced PostgreSQL update of the key's row) → release,
// fenceguard interleaved with concurrency.Mutex and with the server's own
// Put loop, on the harness's etcd. Results: docs/benchmarks.md, "Many
// keys".

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fenceguard/fenceguard/benchmarks/internal/lockbench"
	"github.com/fenceguard/fenceguard/benchmarks/internal/pgbench"
	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/token"
)

// manyClients is how many etcd clients (connections) each peer spreads its
// 64 workers over.
const manyClients = 8

type work func(ctx context.Context, key int, t token.Token) error

func then(w work, key int, t token.Token) func(context.Context) error {
	if w == nil {
		return nil
	}
	return func(ctx context.Context) error { return w(ctx, key, t) }
}

func clients(b *testing.B, eps []string) []*clientv3.Client {
	cs := make([]*clientv3.Client, manyClients)
	for i := range cs {
		cs[i] = newClient(b, eps)
	}
	return cs
}

// manyPeers returns fenceguard (a Locker on each of 8 clients) doing fg and
// concurrency.Mutex (a session per worker — a Mutex's key is its session's
// lease, so two workers on one session and key would both hold it — over
// 8 clients) doing peer.
func manyPeers(b *testing.B, db *etcdserver.DB, sub string, fg, peer work) []lockbench.KeyPeer {
	const ttl = 10 * time.Second
	fgPeer := lockbench.KeyPeer{Name: "fenceguard"}
	for _, c := range clients(b, db.Endpoints) {
		l := newLocker(b, c, db.Prefix+sub+"fg/")
		fgPeer.Acquirers = append(fgPeer.Acquirers, func(ctx context.Context, key int) (func(context.Context) error, func(), error) {
			lease, err := l.Acquire(ctx, lockbench.KeyName(key), ttl)
			if err != nil {
				return nil, nil, err
			}
			return then(fg, key, lease.Token()), func() { _ = lease.Release(ctx) }, nil
		})
	}
	mutex := lockbench.KeyPeer{Name: "concurrency.Mutex"}
	cs := clients(b, db.Endpoints)
	for w := range lockbench.Workers {
		s, err := concurrency.NewSession(cs[w%len(cs)], concurrency.WithTTL(int(ttl/time.Second)))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		mutex.Acquirers = append(mutex.Acquirers, func(ctx context.Context, key int) (func(context.Context) error, func(), error) {
			m := concurrency.NewMutex(s, db.Prefix+sub+"mutex/"+lockbench.KeyName(key))
			if err := m.Lock(ctx); err != nil {
				return nil, nil, err
			}
			return then(peer, key, 0), func() { _ = m.Unlock(ctx) }, nil
		})
	}
	return []lockbench.KeyPeer{fgPeer, mutex}
}

func pid(db *etcdserver.DB) int {
	if db.Server == nil {
		return 0
	}
	return db.Server.PID()
}

// BenchmarkManyKeysPG: each cycle takes the key's lock, adds one to the
// key's row — fenceguard fenced in column mode (Table.Update with the
// lease's token), the Mutex with a plain UPDATE — and releases.
// References: fenceguard with the plain UPDATE, and the plain UPDATE alone
// (the database's ceiling). -benchtime Nx sets the rounds (each peer runs
// 500ms per round).
func BenchmarkManyKeysPG(b *testing.B) {
	pool, pgPID := pgbench.Pool(b)
	db := etcdserver.Shared(b)
	fgRows := pgbench.NewRows(b, pool, "items_fg")
	peerRows := pgbench.NewRows(b, pool, "items_peer")
	plain := func(ctx context.Context, key int, _ token.Token) error { return peerRows.Plain(ctx, key) }
	peers := manyPeers(b, db, "", fgRows.Fenced, plain)
	unfenced := manyPeers(b, db, "u/", plain, nil)[0]
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
// 8 clients each looping a Put of a key drawn alike. A lock cycle is at
// least two writes (acquire, release).
func BenchmarkManyKeysLock(b *testing.B) {
	db := etcdserver.Shared(b)
	peers := manyPeers(b, db, "", nil, nil)
	put := lockbench.KeyPeer{Name: "etcd-put", Ceiling: true}
	// The bare two writes of a lock cycle: a Put and a Delete of a key of
	// the client's own, nothing else.
	pair := lockbench.KeyPeer{Name: "etcd-put-delete"}
	for i, c := range clients(b, db.Endpoints) {
		put.Acquirers = append(put.Acquirers, func(ctx context.Context, key int) (func(context.Context) error, func(), error) {
			_, err := c.Put(ctx, db.Prefix+"put/"+lockbench.KeyName(key), "x")
			return nil, nil, err
		})
		pair.Acquirers = append(pair.Acquirers, func(ctx context.Context, key int) (func(context.Context) error, func(), error) {
			k := fmt.Sprintf("%spair/%s/%d", db.Prefix, lockbench.KeyName(key), i)
			if _, err := c.Put(ctx, k, "x"); err != nil {
				return nil, nil, err
			}
			return nil, func() { _, _ = c.Delete(ctx, k) }, nil
		})
	}
	peers = append(peers, put, pair)
	for _, d := range []lockbench.Dist{lockbench.Uniform, lockbench.Zipf} {
		b.Run(d.Name, func(b *testing.B) { lockbench.CompareManyKeys(b, peers, d, pid(db)) })
	}
}
