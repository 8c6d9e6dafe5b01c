package token_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/token"
)

func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

func TestClockBound(t *testing.T) {
	ctx := context.Background()
	now := time.UnixMicro(1_800_000_000_000_000)
	c := token.ClockBound{Skew: time.Minute, Now: fixedClock(now)}
	bound := token.Token(now.UnixMicro() + time.Minute.Microseconds())
	for _, tc := range []struct {
		name   string
		tok    token.Token
		forged bool
	}{
		{"a revision, far below", 42, false},
		{"the clock", token.Token(now.UnixMicro()), false},
		{"at the bound", bound, false},
		{"just above", bound + 1, true},
		{"2^63-1", math.MaxInt64, true},
		{"2^64-1", math.MaxUint64, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Check(ctx, "r", tc.tok)
			var fe *token.ForgedError
			switch {
			case !tc.forged && err != nil:
				t.Fatalf("Check(%d) = %v, want accepted", tc.tok, err)
			case tc.forged && (!errors.As(err, &fe) || !errors.Is(err, token.ErrForged)):
				t.Fatalf("Check(%d) = %v, want a ForgedError", tc.tok, err)
			case tc.forged && (fe.Bound != bound || fe.Presented != tc.tok || fe.Resource != "r" || fe.By != "clock"):
				t.Fatalf("ForgedError %+v, want bound %d", fe, bound)
			}
		})
	}
	// The zero value: DefaultSkew on the real clock.
	var zero token.ClockBound
	if b := zero.Bound(); b < token.Token(time.Now().Add(token.DefaultSkew-time.Second).UnixMicro()) {
		t.Errorf("zero ClockBound bound %d is below now+DefaultSkew", b)
	}
	if err := token.DefaultCheck().Check(ctx, "r", token.Token(time.Now().UnixMicro())); err != nil {
		t.Errorf("DefaultCheck refuses the clock: %v", err)
	}
	// A clock before the epoch bounds at 1, not at a wrapped uint64.
	early := token.ClockBound{Skew: time.Second, Now: fixedClock(time.Unix(-100, 0))}
	if err := early.Check(ctx, "r", 2); !errors.Is(err, token.ErrForged) {
		t.Errorf("with the clock before 1970, Check(2) = %v, want forged", err)
	}
}

func TestNoCheckAndAll(t *testing.T) {
	ctx := context.Background()
	if err := token.NoCheck().Check(ctx, "r", math.MaxUint64); err != nil {
		t.Errorf("NoCheck refused: %v", err)
	}
	var order []string
	mk := func(name string, refuse bool) token.Check {
		return token.CheckFunc(func(context.Context, string, token.Token) error {
			order = append(order, name)
			if refuse {
				return errors.New(name)
			}
			return nil
		})
	}
	err := token.All(mk("a", false), nil, mk("b", true), mk("c", true)).Check(ctx, "r", 1)
	if err == nil || err.Error() != "b" || strings.Join(order, "") != "ab" {
		t.Errorf("All = %v after %v, want b's refusal after a, b", err, order)
	}
	if err := token.All().Check(ctx, "r", math.MaxUint64); err != nil {
		t.Errorf("All() refused: %v", err)
	}
}

func TestRangeError(t *testing.T) {
	err := error(&token.RangeError{What: "PostgreSQL bigint", Token: math.MaxInt64 + 1, Max: math.MaxInt64})
	if !errors.Is(err, token.ErrRange) || errors.Is(err, token.ErrInvalid) {
		t.Errorf("RangeError unwraps wrongly")
	}
	if want := "fencing token 9223372036854775808 is beyond the PostgreSQL bigint's maximum 9223372036854775807"; err.Error() != want {
		t.Errorf("Error() = %q", err.Error())
	}
}

// seq is a Sequencer over a map, counting its queries.
type seq struct {
	mu      sync.Mutex
	cur     map[string]token.Token
	err     error
	queries atomic.Int64
}

func (s *seq) Current(_ context.Context, key string) (token.Token, error) {
	s.queries.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur[key], s.err
}

func (s *seq) set(key string, t token.Token) {
	s.mu.Lock()
	s.cur[key] = t
	s.mu.Unlock()
}

func TestSequencerCheck(t *testing.T) {
	ctx := context.Background()
	s := &seq{cur: map[string]token.Token{"sku:42": 100}}
	c := token.SequencerCheck(s, token.SequencerOptions{
		LockKey: func(r string) string { return strings.Replace(r, "items/", "sku:", 1) },
	})
	// The current holder's token and older ones pass; a higher one is forged.
	for _, tok := range []token.Token{100, 99, 1} {
		if err := c.Check(ctx, "items/42", tok); err != nil {
			t.Fatalf("Check(%d) = %v, want accepted", tok, err)
		}
	}
	if n := s.queries.Load(); n != 1 {
		t.Errorf("%d queries for three tokens at or below the first answer, want 1 (cached)", n)
	}
	err := c.Check(ctx, "items/42", 101)
	var fe *token.ForgedError
	if !errors.As(err, &fe) || fe.Bound != 100 || fe.By != "sequencer" || fe.Resource != "items/42" {
		t.Fatalf("Check(101) = %v, want forged with bound 100", err)
	}
	if n := s.queries.Load(); n != 2 {
		t.Errorf("a token above the cache must ask again: %d queries", n)
	}
	// The next grant: its token passes once the lock service says so.
	s.set("sku:42", 120)
	if err := c.Check(ctx, "items/42", 120); err != nil {
		t.Fatalf("the next holder's Check(120) = %v", err)
	}
	// Another lock is checked against its own answer.
	if err := c.Check(ctx, "items/7", 1); !errors.Is(err, token.ErrForged) {
		t.Errorf("Check on a lock never granted = %v, want forged (bound 0)", err)
	}
	// Failing closed.
	s.err = errors.New("lock service down")
	if err := c.Check(ctx, "items/42", 121); err == nil || errors.Is(err, token.ErrForged) || !errors.Is(err, s.err) {
		t.Errorf("Check with the sequencer failing = %v, want its error", err)
	}
	if err := token.SequencerCheck(nil, token.SequencerOptions{}).Check(ctx, "r", 1); err == nil {
		t.Error("a nil Sequencer accepted a token")
	}
}

// With the cache off every check asks; a full cache keeps answering right.
func TestSequencerCheckCacheBounds(t *testing.T) {
	ctx := context.Background()
	s := &seq{cur: map[string]token.Token{}}
	off := token.SequencerCheck(s, token.SequencerOptions{CacheSize: -1})
	s.set("k", 5)
	for range 3 {
		if err := off.Check(ctx, "k", 5); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.queries.Load(); n != 3 {
		t.Errorf("cache off: %d queries, want 3", n)
	}
	small := token.SequencerCheck(s, token.SequencerOptions{CacheSize: 2})
	for i, k := range []string{"a", "b", "c", "d", "a", "b"} {
		s.set(k, token.Token(10+i))
		if err := small.Check(ctx, k, token.Token(10+i)); err != nil {
			t.Fatalf("Check(%s) = %v", k, err)
		}
		if err := small.Check(ctx, k, token.Token(11+i)); !errors.Is(err, token.ErrForged) {
			t.Fatalf("Check(%s, above) = %v, want forged", k, err)
		}
	}
}

// A counter recovered by an operator goes down: the cached answer from
// before would admit forgeries up to it. It ages out after CacheTTL, and
// Forget drops it at once.
func TestSequencerCheckCacheAfterRecovery(t *testing.T) {
	ctx := context.Background()
	s := &seq{cur: map[string]token.Token{"k": 1 << 60}}
	now := time.Unix(1000, 0)
	c := token.SequencerCheck(s, token.SequencerOptions{CacheTTL: time.Minute, Now: func() time.Time { return now }})
	if err := c.Check(ctx, "k", 1<<60); err != nil {
		t.Fatal(err)
	}
	s.set("k", 500) // the counter deleted, a new grant from the clock's floor
	if err := c.Check(ctx, "k", 1<<59); err != nil {
		t.Fatalf("within the TTL the cached answer stands (documented): %v", err)
	}
	now = now.Add(time.Minute)
	if err := c.Check(ctx, "k", 1<<59); !errors.Is(err, token.ErrForged) {
		t.Errorf("after CacheTTL, Check(2^59) against 500 = %v, want forged", err)
	}
	s.set("k", 1<<60)
	if err := c.Check(ctx, "k", 1<<60); err != nil { // cached again
		t.Fatal(err)
	}
	s.set("k", 600)
	c.Forget("k")
	if err := c.Check(ctx, "k", 601); !errors.Is(err, token.ErrForged) {
		t.Errorf("after Forget, Check(601) against 600 = %v, want forged", err)
	}
	if err := c.Check(ctx, "k", 600); err != nil {
		t.Fatal(err)
	}
	c.Forget("")
	s.set("k", 10)
	if err := c.Check(ctx, "k", 600); !errors.Is(err, token.ErrForged) {
		t.Errorf("after Forget(\"\"), Check(600) against 10 = %v, want forged", err)
	}
}

func TestMemoryFenceResetLogs(t *testing.T) {
	ctx := context.Background()
	var buf bytes.Buffer
	f := &token.MemoryFence{Logger: slog.New(slog.NewTextHandler(&buf, nil))}
	if err := f.Claim(ctx, "sku:1", 7); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Reset(ctx, "sku:1", 3); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"level=WARN", "resource=sku:1", "from=7", "to=3", "store=memory"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("audit record %q lacks %q", buf.String(), want)
		}
	}
}

// heldSeq is a seq whose next answer, once hold is called, is read when
// asked and delivered only when the returned function is called.
type heldSeq struct {
	seq
	held    chan struct{} // closed when the held query has read its answer
	release chan struct{}
	once    sync.Once
}

func (s *heldSeq) hold() (asked <-chan struct{}, release func()) {
	s.held, s.release = make(chan struct{}), make(chan struct{})
	s.once = sync.Once{}
	return s.held, func() { close(s.release) }
}

func (s *heldSeq) Current(ctx context.Context, key string) (token.Token, error) {
	t, err := s.seq.Current(ctx, key)
	first := false
	s.once.Do(func() { first = true })
	if first && s.held != nil {
		close(s.held)
		<-s.release
	}
	return t, err
}

// A lookup sent before an operator's recovery and answered after Forget
// carries the old, higher answer: it is neither cached nor used, so a
// made-up token between the new and the old answer is refused by the
// check in flight and by every later one.
func TestSequencerCheckForgetDuringLookup(t *testing.T) {
	ctx := context.Background()
	for _, forget := range []string{"k", ""} {
		const old, recovered, forged = token.Token(1 << 60), token.Token(500), token.Token(1000)
		s := &heldSeq{seq: seq{cur: map[string]token.Token{"k": old}}}
		c := token.SequencerCheck(s, token.SequencerOptions{CacheTTL: time.Hour})
		asked, release := s.hold()
		inFlight := make(chan error, 1)
		go func() { inFlight <- c.Check(ctx, "k", forged) }()
		<-asked // the lookup has read the old answer
		s.set("k", recovered)
		c.Forget(forget)
		release()
		if err := <-inFlight; !errors.Is(err, token.ErrForged) {
			t.Errorf("Forget(%q): the check in flight across Forget admitted %d against %d: %v", forget, forged, recovered, err)
		}
		if err := c.Check(ctx, "k", forged); !errors.Is(err, token.ErrForged) {
			t.Errorf("Forget(%q): after the check in flight, Check(%d) against %d = %v, want forged (the old answer %d was cached)", forget, forged, recovered, err, old)
		}
		if err := c.Check(ctx, "k", recovered); err != nil {
			t.Errorf("Forget(%q): the new holder's Check(%d) = %v", forget, recovered, err)
		}
	}
}

// seqFunc is a Sequencer from a function.
type seqFunc func(ctx context.Context, key string) (token.Token, error)

func (f seqFunc) Current(ctx context.Context, key string) (token.Token, error) { return f(ctx, key) }

// A Forget of another lock leaves a lookup's answer cached; a check whose
// every lookup is overtaken by a Forget of its lock refuses, with an error
// that is not a verdict on the token.
func TestSequencerCheckForgetDuringEveryLookup(t *testing.T) {
	ctx := context.Background()
	var c *token.SequencerChecker
	var queries atomic.Int64
	forget := "other"
	c = token.SequencerCheck(seqFunc(func(context.Context, string) (token.Token, error) {
		queries.Add(1)
		c.Forget(forget)
		return 100, nil
	}), token.SequencerOptions{})
	for range 2 {
		if err := c.Check(ctx, "k", 100); err != nil {
			t.Fatalf("Check(100) against 100 with another lock forgotten = %v", err)
		}
	}
	if n := queries.Load(); n != 1 {
		t.Errorf("%d lookups, want 1: a Forget of another lock dropped the answer", n)
	}
	forget = "k"
	c.Forget("k")
	queries.Store(0)
	err := c.Check(ctx, "k", 100)
	if err == nil || errors.Is(err, token.ErrForged) {
		t.Errorf("Check with every lookup overtaken by Forget = %v, want a refusal that is not a verdict", err)
	}
	if n := queries.Load(); n < 2 {
		t.Errorf("%d lookups, want the check to ask again", n)
	}
}
