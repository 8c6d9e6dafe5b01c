package fencetest_test

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/enforce"
	"github.com/fenceguard/fenceguard/token/fencetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func memory(_ *testing.T, c token.Check) fencetest.Subject {
	f := &token.MemoryFence{Check: c, Logger: slog.New(slog.DiscardHandler)}
	return fencetest.Subject{Fence: f, HighWater: func(_ context.Context, r string) (token.Token, error) { return f.HighWater(r), nil }}
}

func TestMemoryFencePasses(t *testing.T) { fencetest.Run(t, memory) }

// A suite that passes everything proves nothing: each broken fence below
// has one defect a real store could have, and the subtest named for it
// must fail. They run in a child process, as a failing test cannot be
// contained in-process.
func TestSuiteCatchesBrokenFences(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the suite in child processes")
	}
	for variant, mustFail := range map[string]string{
		"accepts-lower":   "Claim",
		"float64-compare": "Extremes",
		"no-arg-check":    "BadInput",
		"ignores-check":   "Check",
		"reset-all":       "Reset",
	} {
		t.Run(variant, func(t *testing.T) {
			run := "^TestBroken$/^" + variant + "$/^" + mustFail + "$"
			cmd := exec.Command(os.Args[0], "-test.run", run, "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), "FENCETEST_BROKEN=1")
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a fence with %s:\n%s", variant, out)
			}
			if want := "--- FAIL: TestBroken/" + variant + "/" + mustFail; !strings.Contains(string(out), want) {
				t.Fatalf("want %q in the child's output:\n%s", want, out)
			}
		})
	}
}

func TestBroken(t *testing.T) {
	if os.Getenv("FENCETEST_BROKEN") == "" {
		t.Skip("run by TestSuiteCatchesBrokenFences")
	}
	for name, defect := range map[string]defects{
		"accepts-lower":   {acceptLower: true},
		"float64-compare": {float: true},
		"no-arg-check":    {noCheck: true},
		"ignores-check":   {ignoreCheck: true},
		"reset-all":       {resetAll: true},
	} {
		t.Run(name, func(t *testing.T) {
			fencetest.Run(t, func(_ *testing.T, c token.Check) fencetest.Subject {
				f := &broken{defects: defect, check: c, marks: map[string]token.Token{}}
				return fencetest.Subject{Fence: f, HighWater: f.highWater}
			})
		})
	}
}

// defects a real store could have.
type defects struct {
	acceptLower bool // no check at all: the latest token wins
	float       bool // compares as float64, as a Lua script on numbers would
	noCheck     bool // skips enforce.CheckClaim
	ignoreCheck bool // never runs the token.Check it was given
	resetAll    bool // Reset moves every mark, not just the named one
}

// broken is a map-backed fence with one defect switched on.
type broken struct {
	defects
	check token.Check

	mu    sync.Mutex
	marks map[string]token.Token
}

func (b *broken) Claim(_ context.Context, r string, t token.Token) error {
	if !b.noCheck {
		if err := enforce.CheckClaim(r, t); err != nil {
			return err
		}
	}
	if !b.ignoreCheck {
		c := b.check
		if c == nil {
			c = token.DefaultCheck()
		}
		if err := c.Check(context.Background(), r, t); err != nil {
			return err
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	cur := b.marks[r]
	lower := t < cur
	if b.float {
		lower = float64(t) < float64(cur)
	}
	if lower && !b.acceptLower {
		return &token.StaleError{Resource: r, Presented: t, Current: cur}
	}
	b.marks[r] = max(cur, t)
	if b.acceptLower {
		b.marks[r] = t
	}
	return nil
}

func (b *broken) highWater(_ context.Context, r string) (token.Token, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.marks[r], nil
}

func (b *broken) Reset(_ context.Context, r string, to token.Token) (token.Token, error) {
	if err := enforce.CheckReset(r, to); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	prev := b.marks[r]
	if b.resetAll {
		for k := range b.marks {
			b.marks[k] = to
		}
	}
	b.marks[r] = to
	return prev, nil
}
