package frozen

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
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

// TestRedisFenceSequencerFrozen: with the server frozen (SIGSTOP),
// every public call of the Redis Fence (plain, and with Replicas: its
// pipeline with WAIT), the Sequencer and the Locker's Current, Issued
// and Heal returns by its deadline with an error matching
// context.DeadlineExceeded, and the mark is one a claim presented.
func TestRedisFenceSequencerFrozen(t *testing.T) {
	t.Parallel()
	srv := redisserver.New(t)
	c := redisClient(t, srv.Addr())
	ctx := itest.Ctx(t, 30*time.Second)
	const prefix = "fg:lock:"
	l := redisLocker(t, c, prefix)
	f := redislock.NewFence(c, redislock.FenceOptions{Prefix: "fg:fence:"})
	fr := redislock.NewFence(c, redislock.FenceOptions{Prefix: "fg:fence:", Replicas: 1, ReplicaTimeout: 100 * time.Millisecond})
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

	itest.Pause(t, srv)
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
			for i := range 2 {
				byDeadline(t, fmt.Sprintf("%s (deadline %v, #%d)", name, d, i), d+time.Duration(i)*7*time.Millisecond, call)
			}
		}
	}
	itest.Resume(t, srv)

	// A claim that reached the frozen server's socket before its caller gave
	// up runs at the thaw (the outcome of a call that failed is unknown, as
	// the package doc says): the mark is tok, or tok+1 that every cut claim
	// presented, nothing else.
	if hw, err := f.HighWater(ctx, "res"); err != nil || (hw != tok && hw != tok+1) {
		t.Errorf("after the thaw the mark is %d (%v), want %d or %d", hw, err, tok, tok+1)
	}
	if err := lease.Release(ctx); err != nil {
		t.Errorf("release after the thaw: %v", err)
	}
}

// TestRedisCancelHonoured: the same calls with the context cancelled (not
// timed out) while the server is frozen return by the cancel, with an error
// matching context.Canceled — though go-redis sets the socket deadline from
// the context's deadline only and never watches ctx.Done(), so a context
// without a deadline (an HTTP server's request context when the client
// goes) would hold them until its ReadTimeout.
func TestRedisCancelHonoured(t *testing.T) {
	t.Parallel()
	srv := redisserver.New(t)
	c := redisClient(t, srv.Addr())
	ctx := itest.Ctx(t, 30*time.Second)
	const prefix = "fg:lock:"
	l := redisLocker(t, c, prefix)
	f := redislock.NewFence(c, redislock.FenceOptions{Prefix: "fg:fence:"})
	seq := redislock.NewSequencer(c, prefix)
	if err := f.Claim(ctx, "res", token.Token(time.Now().UnixMicro())); err != nil {
		t.Fatal(err)
	}
	itest.Pause(t, srv)
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
