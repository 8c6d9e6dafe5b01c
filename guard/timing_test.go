package guard_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/token"
)

// refusedErr is what a client reports for a server that is down.
func refusedErr() error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
}

// flaky fails its first acquire with a transport error; every later one
// waits for its context to end and returns that context's error alone, as
// a client does when its call is cut short by the deadline.
type flaky struct {
	locks.Locker
	mu    sync.Mutex
	calls int
}

func (f *flaky) Acquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	f.mu.Lock()
	f.calls++
	n := f.calls
	f.mu.Unlock()
	if n == 1 {
		return nil, refusedErr()
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// The final error keeps the last transient error, even when the last
// attempt failed with nothing but the context's end, and errors.Is finds
// both.
func TestAcquireKeepsLastTransientError(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    locks.Locker
	}{
		{"every attempt refused", func() locks.Locker {
			f := &faulty{Locker: memlock.New()}
			f.acquireFailures.Store(1 << 30)
			return f
		}()},
		{"last attempt cut by the deadline", &flaky{Locker: memlock.New()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuard(t, tc.l, guard.Options{TTL: time.Second, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_, err := g.Acquire(ctx, "k")
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Acquire = %v, want DeadlineExceeded", err)
			}
			if !strings.Contains(err.Error(), "(last attempt: ") || !strings.Contains(err.Error(), "connection refused") {
				t.Errorf("Acquire = %v, want the last attempt's connection refused in it", err)
			}
			if _, ok := tc.l.(*flaky); ok && !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("Acquire = %v, want errors.Is(err, ECONNREFUSED)", err)
			}
		})
	}
}

func TestNewRejectsTTLBelowLockerMinimum(t *testing.T) {
	ml := memlock.New()
	_, err := guard.New(ml, guard.Options{TTL: memlock.MinTTL / 2})
	if !errors.Is(err, locks.ErrInvalidArgument) || !strings.Contains(err.Error(), "minimum "+memlock.MinTTL.String()) {
		t.Fatalf("New with a TTL below memlock's minimum = %v, want ErrInvalidArgument naming the minimum %v", err, memlock.MinTTL)
	}
	if _, err := guard.New(ml, guard.Options{TTL: memlock.MinTTL}); err != nil {
		t.Errorf("New at the minimum TTL: %v", err)
	}
	// A locker that states no minimum is not held to one here.
	if _, err := guard.New(&faulty{Locker: ml}, guard.Options{TTL: memlock.MinTTL / 2}); err != nil {
		t.Errorf("New over a locker with no MinTTL: %v", err)
	}
}

// Expected outcomes are not news: a TryAcquire that finds the lock held,
// and an Acquire that gives up waiting for a held lock when its context
// ends, log nothing above Debug.
func TestExpectedOutcomesLogAtDebug(t *testing.T) {
	ml := memlock.New()
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	g := newGuard(t, ml, guard.Options{TTL: time.Second, Logger: logger})
	ctx := testCtx(t)
	holder, err := ml.Acquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)
	if _, err := g.TryAcquire(ctx, "k"); !errors.Is(err, locks.ErrNotObtained) {
		t.Fatalf("TryAcquire of a held lock: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := g.Acquire(wctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire of a held lock: %v", err)
	}
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	if strings.Contains(out, "level=INFO") || strings.Contains(out, "level=WARN") {
		t.Errorf("expected outcomes logged above Debug:\n%s", out)
	}
	if n := strings.Count(out, "level=DEBUG"); n != 2 {
		t.Errorf("%d Debug lines, want 2 (one per give-up):\n%s", n, out)
	}
}

func TestUnwrapReachesTheLockersLease(t *testing.T) {
	ml := memlock.New()
	g := newGuard(t, ml, guard.Options{TTL: time.Second})
	ctx := testCtx(t)
	lease, err := g.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	inner := lease.Unwrap()
	if inner == nil || inner.Key() != "k" || inner.Token() != lease.Token() {
		t.Fatalf("Unwrap = %v, want memlock's lease of k with token %d", inner, lease.Token())
	}
	if _, ok := locks.LeaseAs[locks.Lease](inner); !ok {
		t.Error("LeaseAs found no lease")
	}
	if _, ok := locks.LeaseAs[*faultyLease](inner); ok {
		t.Error("LeaseAs found a type that is not there")
	}
	// Through a wrapper.
	f := &faulty{Locker: ml}
	fg := newGuard(t, f, guard.Options{TTL: time.Second})
	fl, err := fg.Acquire(ctx, "k2")
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Release(ctx)
	if got, ok := locks.LeaseAs[*faultyLease](fl.Unwrap()); !ok || got.Token() != fl.Token() {
		t.Errorf("LeaseAs[*faultyLease] = %v, %v", got, ok)
	}
}

// hanging's leases never answer a release until its context ends: a lock
// service gone away under a holder.
type hanging struct {
	locks.Locker
	released chan error
}

type hangingLease struct {
	locks.Lease
	h *hanging
}

func (h *hanging) Acquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	l, err := h.Locker.Acquire(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return &hangingLease{l, h}, nil
}

func (l *hangingLease) Release(ctx context.Context) error {
	<-ctx.Done()
	l.h.released <- ctx.Err()
	return ctx.Err()
}

// Do returns by its context's deadline (and a short grace) even when the
// release cannot reach the lock service; the release goes on in the
// background, bounded by the lease's own expiry.
func TestDoReturnsByDeadlineWhenReleaseHangs(t *testing.T) {
	h := &hanging{Locker: memlock.New(), released: make(chan error, 1)}
	g := newGuard(t, h, guard.Options{TTL: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	deadline, _ := ctx.Deadline()
	sched := lateness(time.Until(deadline))
	err := g.Do(ctx, "k", func(ctx context.Context, _ token.Token) error {
		<-ctx.Done()
		return nil
	})
	// The grace is 50ms; allow as much again as the scheduler delayed a
	// timer of the same deadline.
	if late, allowed := time.Since(deadline), 150*time.Millisecond+sched(); late > allowed {
		t.Errorf("Do returned %v after its deadline (release hanging), want within %v: %v", late, allowed, err)
	}
	select {
	case rerr := <-h.released:
		if !errors.Is(rerr, context.DeadlineExceeded) {
			t.Errorf("background release ended with %v", rerr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the background release was not bounded")
	}
}
