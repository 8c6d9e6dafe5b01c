package redislock_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/lockstest"
	"github.com/fenceguard/fenceguard/locks/redislock"
)

// The case: Redis down, guard.Acquire with a 1s deadline returns by
// it, with an error wrapping context.DeadlineExceeded and — when the client
// lets errors out rather than retrying them itself until the deadline —
// the root cause: the last attempt's connection refused.
func TestGuardAcquireWithRedisDown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		o         redis.Options
		rootCause bool
	}{
		// go-redis's own retries and dial retries run into the deadline,
		// and then it reports only the context's error.
		{"client defaults", redis.Options{}, false},
		{"no client retries", noRetries(redis.Options{MaxRetries: -1}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := redisserver.Shared(t)
			p := harness.NewProxy(t, db.Addr)
			o := tc.o
			o.Addr = p.Addr()
			c := redis.NewClient(&o)
			t.Cleanup(func() { _ = c.Close() })
			l := newLocker(t, c, redislock.Options{Prefix: db.Prefix})
			g, err := guard.New(l, guard.Options{TTL: 5 * time.Second, Logger: discard})
			if err != nil {
				t.Fatal(err)
			}
			_ = p.Cut()
			lat := harness.StartLateness(t)
			ctx, cancel := context.WithTimeout(context.Background(), lockstest.DeadlineCall)
			defer cancel()
			deadline, _ := ctx.Deadline()
			_, err = g.Acquire(ctx, "k")
			late := time.Since(deadline)
			t.Logf("guard.Acquire with Redis down returned %v past its deadline: %v", late.Round(time.Millisecond), err)
			if allowed := lat.Allowance(lockstest.DeadlineSlack, deadline); late > allowed {
				t.Errorf("returned %v after the deadline, want under %v", late, allowed)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("error %v: want context.DeadlineExceeded", err)
			}
			if tc.rootCause && (!errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "(last attempt: ")) {
				t.Errorf("error %v: want the last attempt's ECONNREFUSED", err)
			}
		})
	}
}

func TestGuardRefusesTTLBelowMinimum(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	l := newLocker(t, newClient(t, db.Addr), redislock.Options{Prefix: db.Prefix})
	if l.MinTTL() != time.Millisecond {
		t.Fatalf("MinTTL = %v, want 1ms", l.MinTTL())
	}
	_, err := guard.New(l, guard.Options{TTL: l.MinTTL() / 2})
	if !errors.Is(err, locks.ErrInvalidArgument) || !strings.Contains(err.Error(), "minimum "+l.MinTTL().String()) {
		t.Fatalf("guard.New with TTL %v = %v, want locks.ErrInvalidArgument naming the minimum %v", l.MinTTL()/2, err, l.MinTTL())
	}
}

// noRetries turns go-redis's dial retries off where the version in use has
// them (Options.DialerRetries, newer than the oldest go-redis this module
// supports, so it is set by name: the module must build against both).
func noRetries(o redis.Options) redis.Options {
	if f := reflect.ValueOf(&o).Elem().FieldByName("DialerRetries"); f.IsValid() && f.CanSet() {
		f.SetInt(1)
	}
	return o
}

// TestCallsCutShortMatchTheDeadline: against a paused server every call
// given a short deadline fails with an error matching
// context.DeadlineExceeded — go-redis's socket deadline is the context's
// and fires as an i/o timeout, often before the context's own timer (CI
// once saw a Release return the bare i/o timeout). Many rounds, since the
// race between the two is what is tested; the client has
// ContextTimeoutEnabled, as the package doc asks (without it the calls run
// into DialTimeout, 5s).
func TestCallsCutShortMatchTheDeadline(t *testing.T) {
	t.Parallel()
	srv := redisserver.New(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, PoolSize: 4, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	l := newLocker(t, c, redislock.Options{})
	fence := redislock.NewFence(c, redislock.FenceOptions{})
	seq := redislock.NewSequencer(c, "")
	ctx := ctxFor(t, time.Minute)
	held, err := l.TryAcquire(ctx, "held", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Claim(ctx, "r", held.Token()); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Resume() }()
	calls := map[string]func(context.Context) error{
		"TryAcquire": func(ctx context.Context) error { _, err := l.TryAcquire(ctx, "k", time.Second); return err },
		"Renew":      held.Renew,
		"Release":    held.Release,
		"Issued":     func(ctx context.Context) error { _, err := l.Issued(ctx, "held"); return err },
		"Current":    func(ctx context.Context) error { _, err := seq.Current(ctx, "held"); return err },
		"Claim":      func(ctx context.Context) error { return fence.Claim(ctx, "r", held.Token()+1) },
		"HighWater":  func(ctx context.Context) error { _, err := fence.HighWater(ctx, "r"); return err },
	}
	lockstest.CutShort(t, ctx, calls, 15, 20*time.Millisecond)
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := held.Release(ctx); err != nil {
		t.Errorf("Release after the resume: %v", err)
	}
}

// TestCallsReturnAtCancel: against a paused server, every call whose
// context is cancelled — a context without a deadline, like an HTTP
// server's request context when its client goes — returns by the cancel
// with an error matching context.Canceled, not at the client's
// ReadTimeout (go-redis watches only the deadline). What the cut calls sent
// runs at the resume: the release frees its lock, the claim moves the mark,
// and the acquire's clean-up follows its grant, so the lock is free again.
// Close waits for those commands.
func TestCallsReturnAtCancel(t *testing.T) {
	t.Parallel()
	srv := redisserver.New(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, PoolSize: 32, ReadTimeout: 3 * time.Second, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	l, err := redislock.New(c, redislock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fence := redislock.NewFence(c, redislock.FenceOptions{})
	seq := redislock.NewSequencer(c, "")
	ctx := ctxFor(t, 2*time.Minute)
	renewed, err := l.TryAcquire(ctx, "renewed", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	released, err := l.TryAcquire(ctx, "released", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Claim(ctx, "r", released.Token()); err != nil {
		t.Fatal(err)
	}
	// Load the renew and release scripts: a cut call whose EVALSHA came
	// back NOSCRIPT would send nothing more.
	if err := renewed.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	warm, err := l.TryAcquire(ctx, "warm", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Resume() }()
	calls := map[string]func(context.Context) error{
		"TryAcquire":        func(ctx context.Context) error { _, err := l.TryAcquire(ctx, "tried", time.Minute); return err },
		"Acquire":           func(ctx context.Context) error { _, err := l.Acquire(ctx, "acquired", time.Minute); return err },
		"Renew":             renewed.Renew,
		"Release":           released.Release,
		"Heal":              func(ctx context.Context) error { _, err := l.Heal(ctx, "healed", 1); return err },
		"Issued":            func(ctx context.Context) error { _, err := l.Issued(ctx, "renewed"); return err },
		"Locker.Current":    func(ctx context.Context) error { _, err := l.Current(ctx, "renewed"); return err },
		"Sequencer.Current": func(ctx context.Context) error { _, err := seq.Current(ctx, "renewed"); return err },
		"Claim":             func(ctx context.Context) error { return fence.Claim(ctx, "r", released.Token()+1) },
		"Reset":             func(ctx context.Context) error { _, err := fence.Reset(ctx, "reset", 5); return err },
		"HighWater":         func(ctx context.Context) error { _, err := fence.HighWater(ctx, "r"); return err },
	}
	// Against a paused server: every call returns at the cancel.
	harness.ReturnsAtCancel(t, 50*time.Millisecond, lockstest.DeadlineSlack, calls)

	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = l.Close()
	}()
	select {
	case <-closed:
		t.Error("Close returned while the cut calls' commands still waited on the paused server")
	case <-time.After(200 * time.Millisecond):
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return 10s after the resume")
	}
	// What the cut calls sent ran at the resume. (Close waits for the
	// locker's commands; the Fence's cut claim finishes on its own, so its
	// mark is read until it shows, for a bounded time.)
	hw, err := fence.HighWater(ctx, "r")
	for wait := time.Now().Add(5 * time.Second); ; hw, err = fence.HighWater(ctx, "r") {
		if err == nil && hw == released.Token()+1 || time.Now().After(wait) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || hw != released.Token()+1 {
		t.Errorf("mark after the resume %d (%v), want the cut claim's %d", hw, err, released.Token()+1)
	}
	l2 := newLocker(t, c, redislock.Options{})
	for _, key := range []string{"released", "tried", "acquired"} {
		s, err := l2.TryAcquire(ctx, key, time.Second)
		if err != nil {
			t.Errorf("TryAcquire %q after the resume: %v, want the lock free (released, or its cut acquire abandoned)", key, err)
			continue
		}
		_ = s.Release(ctx)
	}
}
