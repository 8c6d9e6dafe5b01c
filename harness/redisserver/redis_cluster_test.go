package redisserver

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness"
)

func TestKeySlot(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	for key, want := range map[string]int{
		"":                     0,
		"foo":                  12182,
		"bar":                  5061,
		"123456789":            0x31c3 % ClusterSlots, // CRC16/XMODEM check value
		"{user1000}.following": KeySlot("user1000"),
		"{user1000}.followers": KeySlot("user1000"),
		"foo{}{bar}":           KeySlot("foo{}{bar}"), // empty tag: the whole key
		"foo{{bar}}zap":        KeySlot("{bar"),
		"foo{bar}{zap}":        KeySlot("bar"),
	} {
		if got := KeySlot(key); got != want {
			t.Errorf("KeySlot(%q) = %d, want %d", key, got, want)
		}
	}
	if crc16("123456789") != 0x31c3 {
		t.Errorf("crc16(123456789) = %#x, want 0x31c3", crc16("123456789"))
	}
}

// The cluster's own CLUSTER KEYSLOT agrees with KeySlot, the client is
// redirected to the slot's master, and the harness's failovers and
// resharding do what they say.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := NewCluster(t, 3, 1)
	t.Logf("3×1 cluster up in %v", time.Since(start))
	ctx, cancel := ctxFor(2 * time.Minute)
	defer cancel()
	if len(c.Nodes) != 6 || len(c.Addrs()) != 6 {
		t.Fatalf("%d nodes", len(c.Nodes))
	}
	masters, err := c.Masters(ctx)
	if err != nil || len(masters) != 3 {
		t.Fatalf("Masters: %v, %v", masters, err)
	}
	for _, m := range masters {
		reps, err := c.Replicas(ctx, m)
		if err != nil || len(reps) != 1 {
			t.Fatalf("Replicas(%s): %v, %v", m.Name(), reps, err)
		}
	}
	for _, key := range []string{"foo", "bar", "{x}:a", "a{b}c", "fg:{lock-1}:q", "zzz"} {
		v, err := do(ctx, c.Nodes[0].Addr(), "CLUSTER", "KEYSLOT", key)
		if err != nil || v != int64(KeySlot(key)) {
			t.Errorf("CLUSTER KEYSLOT %s = %v, %v; KeySlot %d", key, v, err, KeySlot(key))
		}
	}

	key := "k{a}"
	slot := KeySlot(key)
	m, err := c.MasterForSlot(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	other := otherMaster(t, ctx, c, m)
	if _, err := do(ctx, other.Addr(), "SET", key, "1"); !isRedirect(err, "MOVED", m) {
		t.Fatalf("SET on %s: %v, want MOVED to %s", other.Name(), err, m.Addr())
	}
	if _, err := do(ctx, m.Addr(), "SET", key, "1"); err != nil {
		t.Fatal(err)
	}

	// A coordinated failover keeps the key, the old master becomes a replica.
	r, err := c.Failover(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if now, _ := c.MasterForSlot(ctx, slot); now != r || r == m {
		t.Fatalf("after Failover(%s) → %s, slot on %v", m.Name(), r.Name(), now)
	}
	if v, err := do(ctx, r.Addr(), "GET", key); v != "1" || err != nil {
		t.Fatalf("GET on the new master: %v, %v", v, err)
	}
	if reps, _ := c.Replicas(ctx, r); len(reps) != 1 || reps[0] != m {
		t.Fatalf("replicas of the new master %s: %v", r.Name(), reps)
	}

	// Killing the master: the cluster promotes its replica.
	start = time.Now()
	r2, err := c.KillFailover(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover after kill in %v", time.Since(start))
	if r2 != m {
		t.Fatalf("KillFailover(%s) promoted %s, want %s", r.Name(), r2.Name(), m.Name())
	}
	if v, err := do(ctx, m.Addr(), "GET", key); v != "1" || err != nil {
		t.Fatalf("GET on the promoted master: %v, %v", v, err)
	}
	if err := r.Start(false); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	if reps, _ := c.Replicas(ctx, m); len(reps) != 1 || reps[0] != r {
		t.Fatalf("restarted %s is not m's replica: %v", r.Name(), reps)
	}

	// Resharding: ASK while the slot moves, MOVED after.
	if _, err := do(ctx, m.Addr(), "SET", "k2{a}", "2"); err != nil {
		t.Fatal(err)
	}
	midway := false
	err = c.Migrate(ctx, slot, other, MigrateOptions{Midway: func(ctx context.Context) error {
		midway = true
		if _, err := do(ctx, m.Addr(), "GET", key); !isRedirect(err, "ASK", other) {
			return fmt.Errorf("GET on the migrating %s: %v, want ASK to %s", m.Name(), err, other.Addr())
		}
		return nil
	}})
	if err != nil || !midway {
		t.Fatalf("Migrate: %v (midway called: %v)", err, midway)
	}
	if now, _ := c.MasterForSlot(ctx, slot); now != other {
		t.Fatalf("slot %d on %v after Migrate to %s", slot, now, other.Name())
	}
	if _, err := do(ctx, m.Addr(), "GET", key); !isRedirect(err, "MOVED", other) {
		t.Fatalf("GET on the old master: %v, want MOVED", err)
	}
	for k, want := range map[string]string{key: "1", "k2{a}": "2"} {
		if v, err := do(ctx, other.Addr(), "GET", k); v != want || err != nil {
			t.Fatalf("GET %s on the new master: %v, %v", k, v, err)
		}
	}
	// The replica of the new owner has the keys.
	reps, _ := c.Replicas(ctx, other)
	conn := redisConn(t, reps[0].Addr())
	if _, err := conn.Do(ctx, "READONLY"); err != nil {
		t.Fatal(err)
	}
	if v, err := conn.Do(ctx, "GET", key); v != "1" || err != nil {
		t.Fatalf("GET on %s's replica: %v, %v", other.Name(), v, err)
	}
	if err := c.Nodes[0].Start(true); err == nil {
		t.Fatal("a cluster node was wiped")
	}
}

func otherMaster(t *testing.T, ctx context.Context, c *Cluster, not *harness.Server) *harness.Server {
	t.Helper()
	ms, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m != not {
			return m
		}
	}
	t.Fatal("one master only")
	return nil
}

func isRedirect(err error, kind string, to interface{ Addr() string }) bool {
	return errPrefix(err) == kind && strings.HasSuffix(err.Error(), " "+to.Addr())
}

// With Links, replication goes through the master's proxy: a blackholed
// link keeps a write from the replica, and a forced failover loses it.
func TestRedisClusterLinks(t *testing.T) {
	t.Parallel()
	c := NewClusterWith(t, ClusterOptions{Masters: 3, ReplicasPerMaster: 1, Links: true})
	ctx, cancel := ctxFor(2 * time.Minute)
	defer cancel()
	key := "k{b}"
	m, err := c.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	reps, err := c.Replicas(ctx, m)
	if err != nil || len(reps) != 1 {
		t.Fatalf("replicas: %v, %v", reps, err)
	}
	r := reps[0]
	info, err := redisInfo(ctx, r.Addr(), "replication")
	if err != nil {
		t.Fatal(err)
	}
	if got := "127.0.0.1:" + info["master_port"]; got != c.Link(m).Addr() {
		t.Fatalf("%s replicates from %s, want %s's link %s", r.Name(), got, m.Name(), c.Link(m).Addr())
	}
	if got := c.NodeAddr(c.Link(m).Addr()); got != m.Addr() {
		t.Fatalf("NodeAddr(link) = %s, want %s", got, m.Addr())
	}
	other := otherMaster(t, ctx, c, m)
	if _, err := do(ctx, other.Addr(), "GET", key); !isRedirect(err, "MOVED", c.Link(m)) {
		t.Fatalf("GET on %s: %v, want MOVED to the link %s", other.Name(), err, c.Link(m).Addr())
	}
	if _, err := do(ctx, m.Addr(), "SET", key, "1"); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Link(m).Blackhole(); err != nil {
		t.Fatal(err)
	}
	if _, err := do(ctx, m.Addr(), "SET", key, "2"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := c.FailoverTo(ctx, r, true); err != nil {
		t.Fatal(err)
	}
	if v, err := do(ctx, r.Addr(), "GET", key); v != "1" || err != nil {
		t.Fatalf("GET on the promoted replica: %v, %v; want the write before the blackhole", v, err)
	}
}
