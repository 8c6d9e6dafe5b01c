package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock/redlock"
	"github.com/fenceguard/fenceguard/token"
)

// answers calls Current and checks that its answers never decrease.
type answers struct {
	t    *testing.T
	seq  *redlock.Sequencer
	key  string
	seen []token.Token
}

func (a *answers) current(ctx context.Context, what string) token.Token {
	a.t.Helper()
	cur, err := a.seq.Current(ctx, a.key)
	if err != nil {
		a.t.Fatalf("%s: %v", what, err)
	}
	if n := len(a.seen); n > 0 && cur < a.seen[n-1] {
		a.t.Fatalf("%s: Current %d after %d (answers %v)", what, cur, a.seen[n-1], a.seen)
	}
	a.seen = append(a.seen, cur)
	return cur
}

func (a *answers) want(ctx context.Context, what string, want token.Token) {
	a.t.Helper()
	if got := a.current(ctx, what); got != want {
		a.t.Fatalf("%s: Current %d, want %d (answers %v)", what, got, want, a.seen)
	}
}

// Current follows the grants — the holder's token while one holds, the
// last grant's once it is released — through nodes restarted empty (lock
// and counter lost), and fails with a QuorumError when a majority is down.
func TestSequencerFollowsGrants(t *testing.T) {
	srvs, cs := dedicated(t, 5)
	l := newLocker(t, cs, redlock.Options{})
	ctx := ctxFor(t, time.Minute)
	a := &answers{t: t, seq: redlock.NewSequencer(cs, ""), key: "k"}
	restart := func(i int) {
		t.Helper()
		if err := srvs[i].Kill(); err != nil {
			t.Fatal(err)
		}
		if err := srvs[i].Start(true); err != nil {
			t.Fatal(err)
		}
	}
	a.want(ctx, "never granted", 0)
	h, err := l.Acquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	a.want(ctx, "holder H", h.Token())
	restart(0)
	a.want(ctx, "H, node 0 restarted empty", h.Token())
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	a.want(ctx, "H released", h.Token())
	h2, err := l.Acquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if h2.Token() <= h.Token() {
		t.Fatalf("H2 %d after H %d", h2.Token(), h.Token())
	}
	a.want(ctx, "holder H2", h2.Token())
	restart(1)
	restart(2)
	a.want(ctx, "H2, nodes 1 and 2 restarted empty", h2.Token())
	if err := h2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Nodes 1 and 2 have no counter: the three that do outvote nothing.
	a.want(ctx, "H2 released", h2.Token())
	for i := range 3 {
		if err := srvs[i].Kill(); err != nil {
			t.Fatal(err)
		}
	}
	var qe *redlock.QuorumError
	if _, err := a.seq.Current(ctx, "k"); !errors.As(err, &qe) {
		t.Fatalf("3 of 5 nodes down: %v; want a QuorumError", err)
	}
	if _, err := a.seq.Current(ctx, ""); !errors.Is(err, locks.ErrInvalidArgument) {
		t.Fatalf("empty key: %v", err)
	}
	t.Logf("answers %v", a.seen)
}

// The forgery scenario: with the sequencer check in front of a fence, a
// client presenting a token above the current holder's — one above it, or
// 2^62 — is refused and moves no mark; the holder is let in, and so is the
// next holder.
func TestSequencerCheckRefusesForgedTokens(t *testing.T) {
	cs, _, prefix := sharedNodes(t)
	l := newLocker(t, cs, redlock.Options{Prefix: prefix})
	ctx := ctxFor(t, time.Minute)
	const key = "sku:42"
	check := token.SequencerCheck(redlock.NewSequencer(cs, prefix), token.SequencerOptions{})
	fence := &token.MemoryFence{Check: check}
	h, err := l.Acquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, forged := range []token.Token{h.Token() + 1, 1 << 62} {
		var fe *token.ForgedError
		if err := check.Check(ctx, key, forged); !errors.As(err, &fe) || fe.Bound != h.Token() {
			t.Fatalf("token %d while H holds %d: %v; want a ForgedError bound by H's token", forged, h.Token(), err)
		}
		if err := fence.Claim(ctx, key, forged); !errors.Is(err, token.ErrForged) {
			t.Fatalf("claim with %d: %v", forged, err)
		}
	}
	if err := fence.Claim(ctx, key, h.Token()); err != nil {
		t.Fatalf("H's own token %d: %v", h.Token(), err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := l.Acquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if err := fence.Claim(ctx, key, next.Token()); err != nil {
		t.Fatalf("the next holder's token %d: %v", next.Token(), err)
	}
	if err := check.Check(ctx, key, next.Token()+1); !errors.Is(err, token.ErrForged) {
		t.Fatalf("token above the next holder's: %v", err)
	}
	if err := fence.Claim(ctx, key, h.Token()); !errors.Is(err, token.ErrStale) {
		t.Fatalf("H's token after the next holder claimed: %v; want stale", err)
	}
}
