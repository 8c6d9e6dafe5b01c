package rediscluster

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/token"
)

func timeoutClusterClient(t *testing.T, c *redisserver.Cluster) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), Dialer: c.Dialer(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestClusterReleaseDuringMigrationLeavesLeaseUsable: a Release waiting out a
// Cluster slot migration (TRYAGAIN until the move is done) blocks neither
// Deadline nor Renew of the same lease; it completes once the slot has
// moved, and the lock is then free.
func TestClusterReleaseDuringMigrationLeavesLeaseUsable(t *testing.T) {
	c := redisserver.NewCluster(t, 2, 0)
	cc := timeoutClusterClient(t, c)
	ctx := itest.Ctx(t, 25*time.Second)
	l := newLocker(t, cc, redislock.Options{Prefix: "mig:"})
	const key = "k"
	if _, err := l.Heal(ctx, key, token.Token(uint64(time.Now().UnixMicro())+1e11)); err != nil {
		t.Fatal(err)
	}
	s, err := l.TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	slot := redisserver.KeySlot("mig:{" + key + "}")
	from, err := c.MasterForSlot(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	to := c.Nodes[0]
	if to == from {
		to = c.Nodes[1]
	}
	relDone := make(chan error, 1)
	err = c.Migrate(ctx, slot, to, redisserver.MigrateOptions{Midway: func(ctx context.Context) error {
		go func() {
			rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			relDone <- s.Release(rctx)
		}()
		time.Sleep(200 * time.Millisecond)
		select {
		case err := <-relDone:
			t.Logf("Release returned midway: %v", err)
			relDone <- err
		default:
		}
		start := time.Now()
		_ = s.Deadline()
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Errorf("Deadline blocked %v behind the pending Release", d)
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		start = time.Now()
		rerr := s.Renew(rctx)
		if d := time.Since(start); d > time.Second {
			t.Errorf("Renew blocked %v behind the pending Release (%v)", d, rerr)
		}
		t.Logf("Renew midway: %v in %v", rerr, time.Since(start))
		time.Sleep(300 * time.Millisecond)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-relDone:
		if err != nil {
			t.Errorf("Release after the move: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Release never returned")
	}
	s2, err := l.TryAcquire(ctx, key, time.Second)
	if err != nil {
		t.Fatalf("TryAcquire after the migration: %v", err)
	}
	if s2.Token() <= s.Token() {
		t.Errorf("token %d after %d", s2.Token(), s.Token())
	}
	s2.Release(ctx)
}

// TestClusterKillFailoverHealedKeyTokenGrows: a healed key on a Cluster master,
// replication to its replica cut, grants only the master saw, the master
// SIGKILLed and its replica promoted: the next token is larger than every
// lost one.
func TestClusterKillFailoverHealedKeyTokenGrows(t *testing.T) {
	c := redisserver.NewClusterWith(t, redisserver.ClusterOptions{Masters: 3, ReplicasPerMaster: 1, Links: true})
	cc := timeoutClusterClient(t, c)
	ctx := itest.Ctx(t, 28*time.Second)
	l := newLocker(t, cc, redislock.Options{Prefix: "kf:"})
	const key = "k"
	if _, err := l.Heal(ctx, key, token.Token(uint64(time.Now().UnixMicro())+1e12)); err != nil {
		t.Fatal(err)
	}
	s, err := l.TryAcquire(ctx, key, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s.Release(ctx)
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	master, err := c.MasterForKey(ctx, "kf:{"+key+"}")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Link(master).Cut(); err != nil {
		t.Fatal(err)
	}
	var lost token.Token
	for i := 0; i < 3; i++ {
		s, err := l.TryAcquire(ctx, key, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		lost = s.Token()
		s.Release(ctx)
	}
	// The master dies with the grants it never replicated; the link is
	// restored for the harness (nothing is left to replicate from a dead
	// master) and the cluster promotes the replica on its own.
	if err := master.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := c.Link(master).Restore(); err != nil {
		t.Fatal(err)
	}
	cc.ReloadState(ctx)
	var s2 interface{ Token() token.Token }
	for {
		s2, err = l.TryAcquire(ctx, key, time.Second)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no grant after the failover: %v", err)
		}
		cc.ReloadState(ctx)
		time.Sleep(100 * time.Millisecond)
	}
	if s2.Token() <= lost {
		t.Errorf("after the failover: token %d, the lost grant was %d", s2.Token(), lost)
	}
}
