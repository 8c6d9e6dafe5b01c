package zklockbench_test

// Many keys: 64 workers over 10,000 keys (uniform and Zipf-skewed), each
// cycle acquire → (a fenced PostgreSQL update of the key's row) → release,
// fenceguard interleaved with go-zookeeper's zk.Lock and with the server's
// own setData loop, on the harness's ZooKeeper (forceSync=no). Results:
// docs/benchmarks.md, "Many keys".

import (
	"context"
	"encoding/binary"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fenceguard/fenceguard/benchmarks/internal/lockbench"
	"github.com/fenceguard/fenceguard/benchmarks/internal/pgbench"
	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/locks/zklock"
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
func manyPeers(b *testing.B, db *zkserver.DB, sub string, fg, peer work) []lockbench.KeyPeer {
	const ttl = 10 * time.Second
	fgPeer := lockbench.KeyPeer{Name: "fenceguard"}
	lockPeer := lockbench.KeyPeer{Name: "zk.Lock"}
	fgReq, lockReq := meter(sub+fgPeer.Name), meter(sub+lockPeer.Name)
	for range manySessions {
		l, err := zklock.New(db.Addrs, zklock.Options{Prefix: db.Chroot + "/" + sub + "fg", Logger: quiet{}, Dialer: fgReq.dial})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
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
			fgReq.cycles.Add(1)
			return then(fg, key, lease.Token()), func() { _ = lease.Release(ctx) }, nil
		})
		c := benchConnVia(b, db.Addrs[0], ttl, lockReq.dial)
		lockPeer.Acquirers = append(lockPeer.Acquirers, func(ctx context.Context, key int) (func(context.Context) error, func(), error) {
			m := zk.NewLock(c, db.Chroot+"/"+sub+"zk/"+lockbench.KeyName(key), zk.WorldACL(zk.PermAll))
			if err := m.Lock(); err != nil {
				return nil, nil, err
			}
			lockReq.cycles.Add(1)
			return then(peer, key, 0), func() { _ = m.Unlock() }, nil
		})
	}
	return []lockbench.KeyPeer{fgPeer, lockPeer}
}

func pid(db *zkserver.DB) int {
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
	db := zkserver.Shared(b)
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
		b.Run(d.Name, func(b *testing.B) {
			countRequests(b, func() { lockbench.CompareManyKeys(b, peers, d, pid(db), pgPID) })
		})
	}
}

// BenchmarkManyKeysLock: the same cycles with nothing in the critical
// section, against the server's ceiling in the same rounds: 64 workers on
// 8 connections each looping setData on the znode of a key drawn alike. A
// lock cycle is at least two writes (create, delete).
func BenchmarkManyKeysLock(b *testing.B) {
	db := zkserver.Shared(b)
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
		b.Run(d.Name, func(b *testing.B) {
			countRequests(b, func() { lockbench.CompareManyKeys(b, peers, d, pid(db)) })
		})
	}
}

// requests counts what a peer's connections send — one packet a Write in
// go-zookeeper, pings left out — and the locks it took, warm-up included:
// requests per cycle, the server's work and the client's round trips.
type requests struct {
	sent, cycles atomic.Int64
}

// meters are the requests of manyPeers' peers, by sub-prefix and name;
// written only while peers are made, before any of them runs.
var meters = map[string]*requests{}

func meter(name string) *requests {
	if meters[name] == nil {
		meters[name] = &requests{}
	}
	return meters[name]
}

// countRequests runs bench and reports every peer's requests per cycle
// during it (warm-up included).
func countRequests(b *testing.B, bench func()) {
	type count struct{ sent, cycles int64 }
	before := map[string]count{}
	for name, r := range meters {
		before[name] = count{r.sent.Load(), r.cycles.Load()}
	}
	bench()
	for name, r := range meters {
		sent, cycles := r.sent.Load()-before[name].sent, r.cycles.Load()-before[name].cycles
		if cycles == 0 {
			continue
		}
		if rest, ok := strings.CutPrefix(name, "u-"); ok {
			name = rest + "-unfenced"
		}
		b.ReportMetric(float64(sent)/float64(cycles), name+"-requests/cycle")
	}
}

func (r *requests) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, r: r}, nil
}

type countedConn struct {
	net.Conn
	r         *requests
	handshook bool // the first write is the connect request
}

func (c *countedConn) Write(p []byte) (int, error) {
	if !c.handshook {
		c.handshook = true
	} else if len(p) >= 8 && int32(binary.BigEndian.Uint32(p[4:8])) != -2 { // xid -2: a ping
		c.r.sent.Add(1)
	}
	return c.Conn.Write(p)
}
