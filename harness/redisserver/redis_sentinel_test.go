package redisserver

import (
	"testing"
	"time"
)

func TestRedisSentinel(t *testing.T) {
	t.Parallel()
	start := time.Now()
	r := NewSentinel(t)
	t.Logf("primary, replica and 3 sentinels up in %v", time.Since(start))
	ctx, cancel := ctxFor(2 * time.Minute) // the whole test, on a loaded machine
	defer cancel()
	if r.MasterName() == "" || len(r.SentinelAddrs()) != 3 {
		t.Fatalf("master name %q, sentinels %v", r.MasterName(), r.SentinelAddrs())
	}
	p, err := r.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p != r.Nodes[0] {
		t.Fatalf("primary %s, want %s", p.Name(), r.Nodes[0].Name())
	}
	write := func(addr, v string) {
		t.Helper()
		if _, err := redisConn(t, addr).Do(ctx, "SET", "k", v); err != nil {
			t.Fatal(err)
		}
	}
	get := func(addr string) string {
		t.Helper()
		v, _, err := redisConn(t, addr).String(ctx, "GET", "k")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	// A forced failover: the replica, in sync, becomes the primary with the
	// data; the old primary is demoted and replicates from it.
	write(p.Addr(), "1")
	if err := r.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	np, err := r.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SENTINEL FAILOVER done in %v", time.Since(start))
	if np != r.Nodes[1] {
		t.Fatalf("new primary %s, want %s", np.Name(), r.Nodes[1].Name())
	}
	if v := get(np.Addr()); v != "1" {
		t.Fatalf("new primary's k = %q, want 1", v)
	}
	write(np.Addr(), "2")
	if err := r.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	if rep, err := r.Replica(ctx); err != nil || rep != p {
		t.Fatalf("replica %v, %v; want the old primary", rep, err)
	}
	if v := get(p.Addr()); v != "2" {
		t.Fatalf("demoted old primary's k = %q, want 2", v)
	}

	// A stalled replica misses writes; a failover after the primary dies
	// loses them (the fault the lock tests need).
	if err := r.StallReplication(ctx); err != nil {
		t.Fatal(err)
	}
	write(np.Addr(), "3")
	start = time.Now()
	killed, promoted, err := r.KillPrimary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("automatic failover after a kill in %v", time.Since(start))
	if killed != np || promoted != p {
		t.Fatalf("killed %s, promoted %s", killed.Name(), promoted.Name())
	}
	if v := get(promoted.Addr()); v != "2" {
		t.Fatalf("promoted stalled replica's k = %q, want the stale 2", v)
	}

	// The killed primary restarts as a primary of its own and is demoted.
	if err := killed.Start(false); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := r.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted old primary demoted and in sync in %v", time.Since(start))
	if v := get(killed.Addr()); v != "2" {
		t.Fatalf("demoted primary's k = %q, want 2 (its own 3 is discarded)", v)
	}

}
