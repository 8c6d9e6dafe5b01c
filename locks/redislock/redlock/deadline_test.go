package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks/lockstest"
	"github.com/fenceguard/fenceguard/locks/redislock/redlock"
)

// TestCallsCutShortMatchTheDeadline: with every node paused, each call
// given a short deadline returns by it with an error matching
// context.DeadlineExceeded. go-redis reports the cut as the socket's i/o
// timeout, often before the context's timer marks the context done, so
// without package ctxerr the quorum error carried only i/o timeouts. Many
// rounds, since that race is what is tested.
func TestCallsCutShortMatchTheDeadline(t *testing.T) {
	srvs := redisserver.NewN(t, 3)
	var cs []redlock.Client
	for _, s := range srvs {
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		cs = append(cs, c)
	}
	l := newLocker(t, cs, redlock.Options{})
	seq := redlock.NewSequencer(cs, "")
	ctx := ctxFor(t, time.Minute)
	held, err := l.TryAcquire(ctx, "held", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range srvs {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, s := range srvs {
			_ = s.Resume()
		}
	})
	calls := map[string]func(context.Context) error{
		"TryAcquire": func(ctx context.Context) error { _, err := l.TryAcquire(ctx, "k", time.Second); return err },
		"Acquire":    func(ctx context.Context) error { _, err := l.Acquire(ctx, "k", time.Second); return err },
		"Renew":      held.Renew,
		"Release":    held.Release,
		"Issued":     func(ctx context.Context) error { _, err := l.Issued(ctx, "held"); return err },
		"Current":    func(ctx context.Context) error { _, err := seq.Current(ctx, "held"); return err },
	}
	lockstest.CutShort(t, ctx, calls, 15, 20*time.Millisecond)
}
