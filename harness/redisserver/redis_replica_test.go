package redisserver

import (
	"errors"
	"testing"
	"time"
)

func TestRedisReplica(t *testing.T) {
	t.Parallel()
	master := New(t)
	r := NewReplica(t, master)
	if r.Master != master || r.Link.Upstream() != master.Addr() {
		t.Fatalf("replica of %s through %s → %s", r.Master.Name(), r.Link.Addr(), r.Link.Upstream())
	}
	m, rep := redisConn(t, master.Addr()), redisConn(t, r.Replica.Addr())
	ctx, cancel := ctxFor(2 * time.Minute) // the whole test, on a loaded machine
	defer cancel()
	get := func() any {
		t.Helper()
		v, err := rep.Do(ctx, "GET", "k")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if info, err := rep.Info(ctx, "replication"); err != nil || info["role"] != "slave" || info["master_link_status"] != "up" {
		t.Fatalf("replica's INFO replication: %v, %v", info, err)
	}

	// Writes reach the replica; it refuses its own.
	if _, err := m.Do(ctx, "SET", "k", "1"); err != nil {
		t.Fatal(err)
	}
	if err := r.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	if v := get(); v != "1" {
		t.Fatalf("replica GET k = %v, want 1", v)
	}
	if _, err := rep.Do(ctx, "SET", "k", "x"); errPrefix(err) != "READONLY" {
		t.Fatalf("SET on the replica: %v, want READONLY", err)
	}

	// A delayed link: the replica lags, then catches up.
	if err := r.Link.Delay(500 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Do(ctx, "SET", "k", "2"); err != nil {
		t.Fatal(err)
	}
	if v := get(); v != "1" {
		t.Fatalf("replica GET k right after the write = %v, want the stale 1", v)
	}
	if err := r.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	if v := get(); v != "2" {
		t.Fatalf("replica GET k after sync = %v, want 2", v)
	}

	// A cut link: the replica notices, keeps serving its stale data, and
	// resyncs after Restore.
	if err := r.Link.Cut(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "replica notices the cut", func() error {
		info, err := rep.Info(ctx, "replication")
		if err != nil {
			return err
		}
		if info["master_link_status"] != "down" {
			return errors.New("master_link_status " + info["master_link_status"])
		}
		return nil
	})
	if _, err := m.Do(ctx, "SET", "k", "3"); err != nil {
		t.Fatal(err)
	}
	if v := get(); v != "2" {
		t.Fatalf("replica GET k while cut off = %v, want the stale 2", v)
	}
	if err := r.Link.Restore(); err != nil {
		t.Fatal(err)
	}
	if err := r.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	if v := get(); v != "3" {
		t.Fatalf("replica GET k after Restore = %v, want 3", v)
	}

	// A restarted replica replicates again.
	if err := r.Replica.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Do(ctx, "SET", "k", "3b"); err != nil {
		t.Fatal(err)
	}
	if err := r.Replica.Start(false); err != nil {
		t.Fatal(err)
	}
	if err := r.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	rep = redisConn(t, r.Replica.Addr())
	if v := get(); v != "3b" {
		t.Fatalf("restarted replica GET k = %v, want 3b", v)
	}
	if _, err := m.Do(ctx, "SET", "k", "3"); err != nil {
		t.Fatal(err)
	}
	if err := r.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}

	// Failover: the promoted replica takes writes, with the data it had.
	if err := r.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := rep.Do(ctx, "SET", "k", "4"); err != nil {
		t.Fatalf("SET on the promoted replica: %v", err)
	}
	if v, _, err := m.String(ctx, "GET", "k"); err != nil || v != "3" {
		t.Fatalf("old master's k = %q, %v; want 3 (replication is over)", v, err)
	}
}
