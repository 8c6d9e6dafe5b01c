package rediscluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/token"
)

// clusterHealFailover: heal a key far above the clock on a Cluster,
// optionally lose the offset key alone, let everything replicate, stall
// the master's replication (its Link blackholed), grant once (lost), kill
// the master and let the cluster promote its replica, grant again.
func clusterHealFailover(t *testing.T, dropOffset bool) (t1, t2 token.Token) {
	ctx := itest.Ctx(t, 40*time.Second)
	rc := redisserver.NewClusterWith(t, redisserver.ClusterOptions{Masters: 3, ReplicasPerMaster: 1, Links: true})
	cc := newClusterClient(t, rc, nil)
	l := newLocker(t, cc, redislock.Options{Prefix: "hf:"})
	const key = "k"
	master, err := rc.MasterForKey(ctx, "hf:{k}")
	if err != nil {
		t.Fatal(err)
	}
	mc := newClient(t, master.Addr())
	h := nowMicros(t, ctx, mc) + 1_000_000_000_000
	if _, err := l.Heal(ctx, key, h); err != nil {
		t.Fatal(err)
	}
	if dropOffset {
		// Strip the offset from the counter's value (see healFailover).
		v, _, _ := strings.Cut(cc.Get(ctx, "hf:{k}:tok").Val(), ":")
		if err := cc.Set(ctx, "hf:{k}:tok", v, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rc.WaitHealthy(ctx); err != nil { // replicas synced
		t.Fatal(err)
	}
	if err := rc.Link(master).Blackhole(); err != nil {
		t.Fatal(err)
	}
	l1, err := l.TryAcquire(ctx, key, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t1 = l1.Token()
	if _, err := rc.KillFailover(ctx, master); err != nil {
		t.Fatal(err)
	}
	var l2 locks.Lease
	for i := 0; ; i++ {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		l2, err = l.TryAcquire(actx, key, 20*time.Second)
		cancel()
		if err == nil || i > 20 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("no grant after the failover: %v", err)
	}
	t2 = l2.Token()
	t.Logf("healed to %d; lost grant %d; after the failover %d", h, t1, t2)
	return t1, t2
}

// TestClusterOffsetStrippedRepeatsTokenAcrossFailover is
// TestRedisOffsetStrippedRepeatsTokenAcrossFailover on Redis Cluster (the
// cluster's own promotion after SIGKILL), the control of the test below: with
// the heal offset stripped from the counter's value by hand, the promoted
// replica mints the live first holder's token again.
func TestClusterOffsetStrippedRepeatsTokenAcrossFailover(t *testing.T) {
	t1, t2 := clusterHealFailover(t, true)
	if t2 != t1 {
		t.Errorf("control: offset stripped, the next holder got %d, the lost grant had %d; want it repeated", t2, t1)
	}
}

// TestClusterHealedKillFailoverTokenGrows: the same failover with the offset
// intact: the next holder's token is larger than the lost grant's.
func TestClusterHealedKillFailoverTokenGrows(t *testing.T) {
	t1, t2 := clusterHealFailover(t, false)
	if t2 <= t1 {
		t.Errorf("after the failover the next holder got %d, the lost grant had %d", t2, t1)
	}
}
