package rediscluster

import (
	"context"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks/redislock"
)

// TestClusterReleaseDuringMigrationDoesNotBlockDeadline: on a Cluster a
// Release waits for a migrating slot (retried until its context ends). It
// does not hold the lease's mutex meanwhile: Lease.Deadline() — which package
// guard calls to size lease contexts and renewal timers — and Renew return at
// once while the Release waits, and the lease is held all that time.
func TestClusterReleaseDuringMigrationDoesNotBlockDeadline(t *testing.T) {
	ctx := itest.Ctx(t, 30*time.Second)
	rc := redisserver.NewCluster(t, 2, 0)
	cc := newClusterClient(t, rc, nil)
	l := newLocker(t, cc, redislock.Options{Prefix: "rb:"})
	le, err := l.TryAcquire(ctx, "k", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	from, err := rc.MasterForKey(ctx, "rb:{k}")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := rc.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	to := ms[0]
	if to == from {
		to = ms[1]
	}
	var blocked time.Duration
	rdone := make(chan error, 1)
	got := make(chan time.Duration, 1)
	err = rc.Migrate(ctx, redisserver.KeySlot("rb:{k}"), to, redisserver.MigrateOptions{Midway: func(context.Context) error {
		go func() {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			rdone <- le.Release(rctx)
		}()
		time.Sleep(100 * time.Millisecond) // Release is in its retry loop
		go func() {
			start := time.Now()
			_ = le.Deadline()
			got <- time.Since(start)
		}()
		select {
		case blocked = <-got:
		case <-time.After(1500 * time.Millisecond):
			blocked = 1500 * time.Millisecond
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-rdone; err != nil {
		t.Errorf("Release after the move: %v", err)
	}
	if blocked == 1500*time.Millisecond {
		<-got
	}
	if blocked > 100*time.Millisecond {
		t.Errorf("Lease.Deadline() blocked %v behind a Release waiting for the migration", blocked)
	}
}
