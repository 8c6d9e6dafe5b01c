package servers

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The replica follows the master through the link; a cut link stops
// replication (both servers still answer), a restored one resumes it, and
// a promoted replica takes writes.
func TestRedisReplication(t *testing.T) {
	t.Parallel()
	r := NewRedisReplication(t)
	master, replica := redisClient(t, r.Master.Addr()), redisClient(t, r.Replica.Addr())
	ctx, cancel := ctxFor(30 * time.Second)
	defer cancel()
	if err := master.Set(ctx, "k", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := replica.Get(ctx, "k").Result(); err != nil || v != "1" {
		t.Fatalf("replica GET k = %q, %v after WaitSynced; want 1", v, err)
	}
	if err := replica.Set(ctx, "k", "x", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "READONLY") {
		t.Fatalf("write on the replica = %v, want READONLY", err)
	}

	if err := r.Link.Cut(); err != nil {
		t.Fatal(err)
	}
	if err := master.Set(ctx, "k", "2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// WAIT proves the cut: no replica acknowledges the write.
	if n, err := master.Wait(ctx, 1, 200*time.Millisecond).Result(); err != nil || n != 0 {
		t.Fatalf("WAIT 1 with the link cut = %d, %v; want 0", n, err)
	}
	if v, err := replica.Get(ctx, "k").Result(); err != nil || v != "1" {
		t.Fatalf("replica GET k = %q, %v with the link cut; want the old 1", v, err)
	}

	if err := r.Link.Restore(); err != nil {
		t.Fatal(err)
	}
	if err := r.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := replica.Get(ctx, "k").Result(); err != nil || v != "2" {
		t.Fatalf("replica GET k = %q, %v after the link came back; want 2", v, err)
	}

	if err := r.Link.Cut(); err != nil {
		t.Fatal(err)
	}
	if err := r.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if err := replica.Set(ctx, "k", "3", 0).Err(); err != nil {
		t.Fatalf("write on the promoted replica: %v", err)
	}
	if v, err := master.Get(ctx, "k").Result(); err != nil || v != "2" {
		t.Fatalf("old master GET k = %q, %v; want its own 2", v, err)
	}
	if _, err := replica.Get(ctx, "nothing").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET of a missing key: %v", err)
	}
}
