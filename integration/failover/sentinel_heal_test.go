package failover

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/token"
)

// TestSentinelKillFailoverHealedTokenGrows: heal far above the clock on a
// Sentinel setup, stall replication, grant (lost), kill the primary and
// let the sentinels fail over; the failover client's next grant is larger
// than the lost one, the stale holder is refused once the new one wrote,
// and the Sequencer on the new primary answers the new holder's token.
func TestSentinelKillFailoverHealedTokenGrows(t *testing.T) {
	ctx := itest.Ctx(t, 45*time.Second)
	s := redisserver.NewSentinel(t)
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName(), SentinelAddrs: s.SentinelAddrs(), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	l := newLockerOpts(t, c, redislock.Options{})
	h := nowMicros(t, ctx, c) + 1_000_000_000_000
	if _, err := l.Heal(ctx, "k", h); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.StallReplication(ctx); err != nil {
		t.Fatal(err)
	}
	l1, err := l.TryAcquire(ctx, "k", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fence := &token.MemoryFence{Check: token.NoCheck()}
	if err := fence.Claim(ctx, "r", l1.Token()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.KillPrimary(ctx); err != nil {
		t.Fatal(err)
	}
	var l2 locks.Lease
	for i := 0; ; i++ {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		l2, err = l.TryAcquire(actx, "k", 30*time.Second)
		cancel()
		if err == nil || i > 50 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("no grant after the failover: %v", err)
	}
	t.Logf("healed %d, lost grant %d, after the failover %d", h, l1.Token(), l2.Token())
	if l2.Token() <= l1.Token() {
		t.Errorf("token %d after the failover, the lost grant had %d", l2.Token(), l1.Token())
	}
	if err := fence.Claim(ctx, "r", l2.Token()); err != nil {
		t.Errorf("new holder refused: %v", err)
	}
	if err := fence.Claim(ctx, "r", l1.Token()); err == nil {
		t.Errorf("stale holder admitted after the new one")
	}
	if cur, err := redislock.NewSequencer(c, "").Current(ctx, "k"); err != nil || cur != l2.Token() {
		t.Errorf("Sequencer after the failover: %d, %v (holder %d)", cur, err, l2.Token())
	}
}
