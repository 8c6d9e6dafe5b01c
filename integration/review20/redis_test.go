package review20

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/internal/servers"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/token"
)

// redisClient is a client built as redislock's package doc asks:
// ContextTimeoutEnabled, MaxRetries -1.
func redisClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

func redisLocker(t *testing.T, c redislock.Client, prefix string) *redislock.Locker {
	t.Helper()
	l, err := redislock.New(c, redislock.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestHeldRedisFenceSequencerFrozen: with the server frozen (SIGSTOP),
// every public call of the Redis Fence (plain, and with Replicas: its
// pipeline with WAIT), the Sequencer and the Locker's Current, Issued
// and Heal returns by its deadline with an error matching
// context.DeadlineExceeded, and the marks are unmoved after the thaw.
func TestHeldRedisFenceSequencerFrozen(t *testing.T) {
	srv := servers.NewRedis(t)
	c := redisClient(t, srv.Addr())
	ctx := ctxFor(t, 30*time.Second)
	const prefix = "r20:lock:"
	l := redisLocker(t, c, prefix)
	f := redislock.NewFence(c, redislock.FenceOptions{Prefix: "r20:fence:"})
	fr := redislock.NewFence(c, redislock.FenceOptions{Prefix: "r20:fence:", Replicas: 1, ReplicaTimeout: 100 * time.Millisecond})
	seq := redislock.NewSequencer(c, prefix)

	lease, err := l.Acquire(ctx, "held", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tok := lease.Token()
	if err := f.Claim(ctx, "res", tok); err != nil {
		t.Fatal(err)
	}
	// Warm the pool with several connections, so the frozen calls find an
	// open connection rather than dialling (a dial to a stopped process is
	// accepted by the kernel too; both paths are exercised).
	for range 4 {
		if _, err := seq.Current(ctx, "held"); err != nil {
			t.Fatal(err)
		}
	}

	pause(t, srv)
	calls := map[string]func(ctx context.Context) error{
		"Fence.Claim": func(ctx context.Context) error { return f.Claim(ctx, "res", tok+1) },
		"Fence.Claim(Replicas)": func(ctx context.Context) error {
			return fr.Claim(ctx, "res", tok+1)
		},
		"Fence.HighWater": func(ctx context.Context) error { _, err := f.HighWater(ctx, "res"); return err },
		"Fence.Reset":     func(ctx context.Context) error { _, err := f.Reset(ctx, "res2", 5); return err },
		"Fence.Reset(Replicas)": func(ctx context.Context) error {
			_, err := fr.Reset(ctx, "res2", 5)
			return err
		},
		"Sequencer.Current": func(ctx context.Context) error { _, err := seq.Current(ctx, "held"); return err },
		"Locker.Current":    func(ctx context.Context) error { _, err := l.Current(ctx, "held"); return err },
		"Locker.Issued":     func(ctx context.Context) error { _, err := l.Issued(ctx, "held"); return err },
		"Locker.Heal":       func(ctx context.Context) error { _, err := l.Heal(ctx, "other", 10); return err },
		"Lease.Renew":       func(ctx context.Context) error { return lease.Renew(ctx) },
		"Locker.TryAcquire": func(ctx context.Context) error { _, err := l.TryAcquire(ctx, "free", time.Second); return err },
		"Locker.Acquire":    func(ctx context.Context) error { _, err := l.Acquire(ctx, "held", time.Second); return err },
	}
	for name, call := range calls {
		for _, d := range deadlines {
			for i := range 3 {
				byDeadline(t, fmt.Sprintf("%s (deadline %v, #%d)", name, d, i), d+time.Duration(i)*7*time.Millisecond, call)
			}
		}
	}
	resume(t, srv)

	if hw, err := f.HighWater(ctx, "res"); err != nil || hw != tok {
		t.Errorf("after the thaw the mark is %d (%v), want %d: a claim cut short moved it", hw, err, tok)
	}
	if err := lease.Release(ctx); err != nil {
		t.Errorf("release after the thaw: %v", err)
	}
}

// TestHeldRedisFenceCancelled: the same calls with the context cancelled
// (not timed out) while the server is frozen match context.Canceled.
func TestHeldRedisFenceCancelled(t *testing.T) {
	srv := servers.NewRedis(t)
	c := redisClient(t, srv.Addr())
	ctx := ctxFor(t, 30*time.Second)
	const prefix = "r20:lock:"
	l := redisLocker(t, c, prefix)
	f := redislock.NewFence(c, redislock.FenceOptions{Prefix: "r20:fence:"})
	seq := redislock.NewSequencer(c, prefix)
	if err := f.Claim(ctx, "res", token.Token(time.Now().UnixMicro())); err != nil {
		t.Fatal(err)
	}
	pause(t, srv)
	calls := map[string]func(ctx context.Context) error{
		"Fence.Claim":       func(ctx context.Context) error { return f.Claim(ctx, "res", token.Token(time.Now().UnixMicro())) },
		"Fence.HighWater":   func(ctx context.Context) error { _, err := f.HighWater(ctx, "res"); return err },
		"Sequencer.Current": func(ctx context.Context) error { _, err := seq.Current(ctx, "k"); return err },
		"Locker.Issued":     func(ctx context.Context) error { _, err := l.Issued(ctx, "k"); return err },
		"Locker.Acquire":    func(ctx context.Context) error { _, err := l.Acquire(ctx, "k", time.Second); return err },
	}
	for name, call := range calls {
		byCancel(t, name, 100*time.Millisecond, call)
	}
}
