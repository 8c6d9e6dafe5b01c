package sequencer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks/redislock"
)

// TestSequencerRefusesPlainReplica: a plain client on a replica that
// has not received the grant (replication cut) gets ErrReplica, never the
// replica's clock floor (which is above the holder's token).
func TestSequencerRefusesPlainReplica(t *testing.T) {
	ctx := itest.Ctx(t, 20*time.Second)
	m := redisserver.New(t)
	r := redisserver.NewReplica(t, m)
	mc := newClient(t, m.Addr())
	rc := newClient(t, r.Replica.Addr())
	if err := r.Link.Cut(); err != nil {
		t.Fatal(err)
	}
	l := newLocker(t, mc, redislock.Options{})
	le, err := l.TryAcquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The replica sees the lock free: what it would answer.
	if n, _ := rc.Exists(ctx, redislock.DefaultPrefix+"{k}").Result(); n != 0 {
		t.Fatal("the replica has the grant: the test did not make it lag")
	}
	seq := redislock.NewSequencer(rc, "")
	if a, _ := itest.CheckSequencer(t, ctx, "replica", seq, "k", le.Token(), 5); a != 0 {
		t.Errorf("a replica answered %d times", a)
	}
	// Locker.Current on a replica client, too.
	lr := newLocker(t, rc, redislock.Options{})
	if _, err := lr.Current(ctx, "k"); !errors.Is(err, redislock.ErrReplica) {
		t.Errorf("Locker.Current on a replica: %v", err)
	}
	// The master answers the holder's token.
	itest.CheckSequencer(t, ctx, "master", redislock.NewSequencer(mc, ""), "k", le.Token(), 3)
}

// TestSequencerSentinelReplicaRouting: with replication stalled and a
// grant the replica never saw, every Sentinel client flavour either answers
// the holder's token (routed to the master) or refuses with ErrReplica —
// ReplicaOnly, and the Sentinel cluster client with RouteRandomly and
// ReadOnly (which send read-only commands to replicas).
func TestSequencerSentinelReplicaRouting(t *testing.T) {
	ctx := itest.Ctx(t, 30*time.Second)
	s := redisserver.NewSentinel(t)
	opts := func() *redis.FailoverOptions {
		return &redis.FailoverOptions{MasterName: s.MasterName(), SentinelAddrs: s.SentinelAddrs(), MaxRetries: -1}
	}
	master := redis.NewFailoverClient(opts())
	t.Cleanup(func() { master.Close() })
	if err := s.StallReplication(ctx); err != nil {
		t.Fatal(err)
	}
	l := newLocker(t, master, redislock.Options{})
	le, err := l.TryAcquire(ctx, "k", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	o := opts()
	o.ReplicaOnly = true
	replicaOnly := redis.NewFailoverClient(o)
	t.Cleanup(func() { replicaOnly.Close() })
	if a, r := itest.CheckSequencer(t, ctx, "ReplicaOnly", redislock.NewSequencer(replicaOnly, ""), "k", le.Token(), 5); a != 0 || r == 0 {
		t.Errorf("ReplicaOnly: %d answers, %d refusals", a, r)
	}
	// What redis.NewFailoverClusterClient builds (a ClusterClient whose
	// one slot range lists the master and its replica, routing read-only
	// commands to the replica), without its sentinel goroutines, which
	// go-redis never stops (its Close does not close them).
	p, err := s.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Replica(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slots := func(context.Context) ([]redis.ClusterSlot, error) {
		return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: p.Addr()}, {Addr: rep.Addr()}}}}, nil
	}
	for _, c := range []struct {
		name string
		set  func(*redis.ClusterOptions)
	}{
		{"RouteRandomly", func(o *redis.ClusterOptions) { o.RouteRandomly = true }},
		// Not RouteByLatency: go-redis v9.23.0 starts a new node's latency
		// probe before it finishes setting up the node's client, a data
		// race the race detector reports.
		{"ReadOnly", func(o *redis.ClusterOptions) { o.ReadOnly = true }},
	} {
		o := &redis.ClusterOptions{ClusterSlots: slots, MaxRetries: -1}
		c.set(o)
		cc := redis.NewClusterClient(o)
		t.Cleanup(func() { cc.Close() })
		// The routing does reach the stale replica for reads:
		reads := 0
		for range 20 {
			if n, err := cc.Exists(ctx, redislock.DefaultPrefix+"{k}").Result(); err == nil && n == 0 {
				reads++
			}
		}
		a, r := itest.CheckSequencer(t, ctx, c.name, redislock.NewSequencer(cc, ""), "k", le.Token(), 20)
		t.Logf("%s: %d of 20 plain reads saw the stale replica; the Sequencer: %d answers, %d refusals", c.name, reads, a, r)
	}
}
