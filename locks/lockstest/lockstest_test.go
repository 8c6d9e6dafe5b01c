package lockstest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/lockstest"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/token"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A suite that passes everything proves nothing. Each broken locker below
// has one defect a real backend could have; the subtest named for it must
// fail. The broken lockers run in a child process (the suite calls t.Fatal,
// and a failing test cannot be contained in-process).
func TestSuiteCatchesBrokenLockers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the suite in child processes")
	}
	for variant, mustFail := range map[string]string{
		"no-exclusion":          "OneWinnerAmongTryAcquires",
		"racy-exclusion":        "MutualExclusion",
		"repeating-tokens":      "TokensIncrease",
		"unconditional-release": "Expiry",
		"slow-cancel":           "CancelWhileWaiting",
		"leaky-cancel":          "CancelWhileWaiting",
		"issued-sequencer":      "Sequencer",
		"close-ignored":         "AcquireAfterClose",
		"delay-ignored":         "LockDelay",
		"delay-on-release":      "LockDelay",
	} {
		t.Run(variant, func(t *testing.T) {
			run := "^TestBroken$/^" + variant + "$/^" + mustFail + "$"
			cmd := exec.Command(os.Args[0], "-test.run", run, "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), "LOCKSTEST_BROKEN=1")
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a locker with %s:\n%s", variant, out)
			}
			want := "--- FAIL: TestBroken/" + variant + "/" + mustFail
			if !strings.Contains(string(out), want) {
				t.Fatalf("want %q in the child's output:\n%s", want, out)
			}
		})
	}
}

func TestBroken(t *testing.T) {
	if os.Getenv("LOCKSTEST_BROKEN") == "" {
		t.Skip("run by TestSuiteCatchesBrokenLockers")
	}
	variants := map[string]func() locks.Locker{
		"no-exclusion":          func() locks.Locker { return &freeForAll{} },
		"racy-exclusion":        func() locks.Locker { return &freeForAll{} },
		"repeating-tokens":      func() locks.Locker { return &wrapped{Locker: memlock.New(), fixedToken: 7} },
		"unconditional-release": func() locks.Locker { m := memlock.New(); return &wrapped{Locker: m, breakOnRelease: m} },
		"slow-cancel":           func() locks.Locker { return &wrapped{Locker: memlock.New(), cancelDelay: 300 * time.Millisecond} },
		"leaky-cancel":          func() locks.Locker { return &wrapped{Locker: memlock.New(), keepAbandoned: true} },
		"issued-sequencer":      func() locks.Locker { return memlock.New() },
		"close-ignored":         func() locks.Locker { return closeIgnored{memlock.New()} },
		"delay-ignored":         func() locks.Locker { return memlock.New() },
		"delay-on-release":      func() locks.Locker { return memlock.New() },
	}
	for name, mk := range variants {
		t.Run(name, func(t *testing.T) {
			cfg := lockstest.Config{NewLocker: func(*testing.T) locks.Locker { return mk() }}
			if name == "issued-sequencer" {
				// The last token issued for any key, as the old forged-token
				// bound was: above the holder's once another key is granted.
				cfg.NewSequencer = func(_ *testing.T, l locks.Locker) token.Sequencer {
					return sequencerFunc(l.(*memlock.Locker).Issued)
				}
			}
			switch name {
			case "delay-ignored": // claims a delay it does not keep
				cfg.LockDelay = func(*testing.T) (locks.Locker, time.Duration) { return mk(), brokenDelay }
			case "delay-on-release": // keeps it after a release too
				cfg.LockDelay = func(t *testing.T) (locks.Locker, time.Duration) {
					l, err := memlock.NewWithOptions(memlock.Options{LockDelay: brokenDelay})
					if err != nil {
						t.Fatal(err)
					}
					return &wrapped{Locker: l, releaseDelay: brokenDelay}, brokenDelay
				}
			}
			lockstest.Run(t, cfg)
		})
	}
}

// brokenDelay is the lock-delay of the broken lock-delay variants.
const brokenDelay = 300 * time.Millisecond

type sequencerFunc func(ctx context.Context, key string) (token.Token, error)

func (f sequencerFunc) Current(ctx context.Context, key string) (token.Token, error) {
	return f(ctx, key)
}

// freeForAll grants every request: increasing tokens, no exclusion.
type freeForAll struct{ n atomic.Uint64 }

func (f *freeForAll) Acquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	return f.TryAcquire(ctx, key, ttl)
}

func (f *freeForAll) TryAcquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	if err := locks.CheckArgs(key, ttl, time.Millisecond); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &freeLease{key: key, tok: token.Token(f.n.Add(1)), ttl: ttl, deadline: time.Now().Add(ttl)}, nil
}

type freeLease struct {
	key      string
	tok      token.Token
	ttl      time.Duration
	deadline time.Time
}

func (l *freeLease) Key() string                   { return l.key }
func (l *freeLease) Token() token.Token            { return l.tok }
func (l *freeLease) TTL() time.Duration            { return l.ttl }
func (l *freeLease) Deadline() time.Time           { return l.deadline }
func (l *freeLease) Renew(context.Context) error   { return nil }
func (l *freeLease) Release(context.Context) error { return nil }

// wrapped is memlock with one defect switched on.
type wrapped struct {
	locks.Locker
	fixedToken     token.Token
	breakOnRelease *memlock.Locker
	cancelDelay    time.Duration
	keepAbandoned  bool
	releaseDelay   time.Duration
}

func (w *wrapped) Acquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	l, err := w.Locker.Acquire(ctx, key, ttl)
	if err != nil {
		if w.keepAbandoned && ctx.Err() != nil {
			// Goes on waiting after the caller gave up (for a second, so
			// the child process can exit), and takes the lock.
			go func() {
				inner, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
				defer cancel()
				_, _ = w.Locker.Acquire(inner, key, ttl)
			}()
		}
		time.Sleep(w.cancelDelay)
		return nil, err
	}
	return w.wrap(l), nil
}

func (w *wrapped) TryAcquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	l, err := w.Locker.TryAcquire(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return w.wrap(l), nil
}

func (w *wrapped) wrap(l locks.Lease) locks.Lease { return &wrappedLease{Lease: l, w: w} }

type wrappedLease struct {
	locks.Lease
	w *wrapped
}

func (l *wrappedLease) Token() token.Token {
	if l.w.fixedToken != 0 {
		return l.w.fixedToken
	}
	return l.Lease.Token()
}

func (l *wrappedLease) Release(ctx context.Context) error {
	if l.w.breakOnRelease != nil {
		l.w.breakOnRelease.Break(l.Key())
		return nil
	}
	if l.w.releaseDelay > 0 {
		// The release lands the delay later, as if the lock service
		// applied its lock-delay to a release too.
		go func() {
			time.Sleep(l.w.releaseDelay)
			_ = l.Lease.Release(context.WithoutCancel(ctx))
		}()
		return nil
	}
	return l.Lease.Release(ctx)
}

// closeIgnored has a Close that does nothing: an acquire after it waits
// for the lock as if the locker were open.
type closeIgnored struct{ *memlock.Locker }

func (closeIgnored) Close() error { return nil }
