package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness"
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

// TestCallsReturnAtCancel: with every node paused, each call whose context
// is cancelled — without a deadline, and with a NodeTimeout far off —
// returns by the cancel with an error matching context.Canceled (go-redis
// watches only deadlines). At the resume the cut acquires' grants land and
// are given back, so the locks are free again; Close waits for the cut
// commands.
func TestCallsReturnAtCancel(t *testing.T) {
	srvs := redisserver.NewN(t, 3)
	var cs []redlock.Client
	for _, s := range srvs {
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, PoolSize: 32, ReadTimeout: 20 * time.Second, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		cs = append(cs, c)
	}
	l, err := redlock.New(cs, redlock.Options{NodeTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	seq := redlock.NewSequencer(cs, "")
	ctx := ctxFor(t, 2*time.Minute)
	renewed, err := l.TryAcquire(ctx, "renewed", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	released, err := l.TryAcquire(ctx, "released", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Load the scripts: a cut call whose EVALSHA came back NOSCRIPT would
	// send nothing more.
	if err := renewed.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Issued(ctx, "renewed"); err != nil {
		t.Fatal(err)
	}
	if _, err := seq.Current(ctx, "renewed"); err != nil {
		t.Fatal(err)
	}
	if err := l.Heal(ctx, "healed", 1); err != nil {
		t.Fatal(err)
	}
	warm, err := l.TryAcquire(ctx, "warm", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
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
		"TryAcquire": func(ctx context.Context) error { _, err := l.TryAcquire(ctx, "tried", time.Minute); return err },
		"Acquire":    func(ctx context.Context) error { _, err := l.Acquire(ctx, "acquired", time.Minute); return err },
		"Renew":      renewed.Renew,
		"Release":    released.Release,
		"Issued":     func(ctx context.Context) error { _, err := l.Issued(ctx, "renewed"); return err },
		"Heal":       func(ctx context.Context) error { return l.Heal(ctx, "healed", 2) },
		"Current":    func(ctx context.Context) error { _, err := seq.Current(ctx, "renewed"); return err },
	}
	// Against paused nodes: every call returns at the cancel.
	harness.ReturnsAtCancel(t, 50*time.Millisecond, lockstest.DeadlineSlack, calls)

	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = l.Close()
	}()
	select {
	case <-closed:
		t.Error("Close returned while the cut calls' commands still waited on the paused nodes")
	case <-time.After(200 * time.Millisecond):
	}
	for _, s := range srvs {
		if err := s.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return 10s after the resume")
	}
	l2 := newLocker(t, cs, redlock.Options{})
	for _, key := range []string{"released", "tried", "acquired"} {
		s, err := l2.TryAcquire(ctx, key, time.Second)
		if err != nil {
			t.Errorf("TryAcquire %q after the resume: %v, want the lock free (released, or its cut acquire given back)", key, err)
			continue
		}
		_ = s.Release(ctx)
	}
}
