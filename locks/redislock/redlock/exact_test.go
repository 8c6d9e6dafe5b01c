package redlock_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock/redlock"
	"github.com/fenceguard/fenceguard/token"
)

// sharedNodes returns clients of the package's five shared Redis servers,
// the raw clients for inspecting keys, and the calling test's key prefix.
func sharedNodes(t *testing.T) ([]redlock.Client, []*redis.Client, string) {
	t.Helper()
	var cs []redlock.Client
	var raws []*redis.Client
	var prefix string
	for _, db := range redisserver.SharedN(t, 5) {
		c := redis.NewClient(redlock.OneDial(redis.Options{Addr: db.Addr, MaxRetries: -1, DialTimeout: time.Second}))
		t.Cleanup(func() { _ = c.Close() })
		cs, raws, prefix = append(cs, c), append(raws, c), db.Prefix
	}
	return cs, raws, prefix
}

// grants acquires and releases key n times and returns the tokens,
// checking after each grant that Issued is not below it.
func grants(t *testing.T, ctx context.Context, l *redlock.Locker, key string, n int) []token.Token {
	t.Helper()
	var toks []token.Token
	for range n {
		lease, err := l.Acquire(ctx, key, 5*time.Second)
		if err != nil {
			t.Fatalf("grant %d (after %v): %v", len(toks), toks, err)
		}
		toks = append(toks, lease.Token())
		if is, err := l.Issued(ctx, key); err != nil || is < lease.Token() {
			t.Errorf("Issued = %d, %v while %d is held (tokens so far %v)", is, err, lease.Token(), toks)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if is, err := l.Issued(ctx, key); err != nil || is < lease.Token() {
			t.Errorf("Issued = %d, %v after %d was released (tokens so far %v)", is, err, lease.Token(), toks)
		}
	}
	return toks
}

// Around 2^53, where Lua's doubles stop being exact, successive grants
// still get distinct, strictly increasing tokens, each above the heal
// target, and Issued is never below one of them. (Before the scripts
// compared and formatted counters as doubles, Heal(2^53−1) gave
// 2^53, 2^53+1, 2^53+1, …)
func TestTokensExactAround2p53(t *testing.T) {
	cs, _, prefix := sharedNodes(t)
	l := newLocker(t, cs, redlock.Options{Prefix: prefix})
	ctx := ctxFor(t, time.Minute)
	for _, to := range []token.Token{1<<53 - 2, 1<<53 - 1} {
		key := "exact-" + to.String()
		if err := l.Heal(ctx, key, to); err != nil {
			t.Fatalf("Heal(%d): %v", to, err)
		}
		toks := grants(t, ctx, l, key, 6)
		t.Logf("Heal(2^53%+d): tokens %v", int64(to)-1<<53, toks)
		last := to
		for i, tok := range toks {
			if tok <= last {
				t.Errorf("Heal(%d): grant %d got %d after %d (all: %v)", to, i, tok, last, toks)
				break
			}
			last = tok
		}
		if last < 1<<53+2 {
			t.Errorf("Heal(%d): tokens %v do not cross 2^53+2", to, toks)
		}
	}
}

// At the ceiling, token.MaxInt64: Heal refuses targets at or above it; the
// grant that reaches it is the last; the next acquire fails with a
// RangeError and leaves no lock behind on any node; Issued stays at or
// above the last token.
func TestTokenCeiling(t *testing.T) {
	cs, raws, prefix := sharedNodes(t)
	l := newLocker(t, cs, redlock.Options{Prefix: prefix})
	ctx := ctxFor(t, time.Minute)
	const key = "ceiling"
	for _, to := range []token.Token{token.MaxInt64, token.MaxInt64 + 1, math.MaxUint64} {
		err := l.Heal(ctx, key, to)
		var re *token.RangeError
		if !errors.Is(err, locks.ErrInvalidArgument) || !errors.As(err, &re) {
			t.Fatalf("Heal(%d) = %v; want ErrInvalidArgument and a RangeError", to, err)
		}
	}
	for i, raw := range raws {
		if n, err := raw.Exists(ctx, prefix+"{"+key+"}:tok").Result(); err != nil || n != 0 {
			t.Fatalf("node %d: a refused Heal wrote the counter (%d, %v)", i, n, err)
		}
	}
	// Grants reach the ceiling: a counter at token.MaxInt64 − 1 (below the
	// clock floor's reach: no offset) grants MaxInt64, then nothing.
	for _, raw := range raws {
		if err := raw.Set(ctx, prefix+"{"+key+"}:tok", strconv.FormatUint(uint64(token.MaxInt64-1), 10), time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if toks := grants(t, ctx, l, key, 1); toks[0] != token.MaxInt64 {
		t.Fatalf("token %v; want %d", toks, token.MaxInt64)
	}
	_, err := l.Acquire(ctx, key, 5*time.Second)
	var re *token.RangeError
	if !errors.As(err, &re) || !errors.Is(err, token.ErrRange) {
		t.Fatalf("acquire past the ceiling: %v; want a RangeError", err)
	}
	t.Logf("past the ceiling: %v", err)
	if _, err := l.TryAcquire(ctx, key, 5*time.Second); !errors.As(err, &re) {
		t.Fatalf("TryAcquire past the ceiling: %v; want a RangeError", err)
	}
	for i, raw := range raws {
		if n, err := raw.Exists(ctx, prefix+"{"+key+"}").Result(); err != nil || n != 0 {
			t.Fatalf("node %d: the refused acquire left its lock behind (%d, %v)", i, n, err)
		}
	}
	if is, err := l.Issued(ctx, key); err != nil || is < token.MaxInt64 {
		t.Fatalf("Issued = %d, %v at the ceiling", is, err)
	}
	// A heal records the target's lead over the clock: healed to v, a key
	// has tokens for (MaxInt64 − v) µs of clock. Healed to MaxInt64 − 1, the
	// next grant (more than a µs later) is past the ceiling.
	if err := l.Heal(ctx, "ceiling-2", token.MaxInt64-1); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, "ceiling-2", 5*time.Second); !errors.As(err, &re) {
		t.Fatalf("TryAcquire after Heal(MaxInt64 − 1): %v; want a RangeError", err)
	}
	if is, err := l.Issued(ctx, "ceiling-2"); err != nil || is != token.MaxInt64 {
		t.Fatalf("Issued = %d, %v after Heal(MaxInt64 − 1); want the ceiling", is, err)
	}
	for _, bad := range []struct {
		key string
		to  token.Token
	}{{"", 5}, {"k", 0}} {
		if err := l.Heal(ctx, bad.key, bad.to); !errors.Is(err, locks.ErrInvalidArgument) {
			t.Errorf("Heal(%q, %d) = %v; want ErrInvalidArgument", bad.key, bad.to, err)
		}
	}
}

// A counter that is not a canonical decimal up to the ceiling was not
// written by this package: the node counts as failed for that key (on a
// minority the lock still works; on a majority acquires fail with a
// QuorumError naming it), nothing is taken there, and Heal repairs it.
func TestMalformedCounter(t *testing.T) {
	cs, raws, prefix := sharedNodes(t)
	l := newLocker(t, cs, redlock.Options{Prefix: prefix})
	ctx := ctxFor(t, time.Minute)
	for _, bad := range []string{"0", "abc", "007", "-5", "1.5", "9223372036854775808", "18446744073709551616", ""} {
		key := "malformed-" + bad
		counter := prefix + "{" + key + "}:tok"
		first := grants(t, ctx, l, key, 1)[0]
		if err := raws[0].Set(ctx, counter, bad, 0).Err(); err != nil {
			t.Fatal(err)
		}
		next := grants(t, ctx, l, key, 1)[0]
		if next <= first {
			t.Fatalf("%q on one node: token %d after %d", bad, next, first)
		}
		if got, _ := raws[0].Get(ctx, counter).Result(); got != bad {
			t.Fatalf("%q on one node: the grant rewrote it to %q", bad, got)
		}
		for _, raw := range raws[1:3] {
			if err := raw.Set(ctx, counter, bad, 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		_, err := l.Acquire(ctx, key, 5*time.Second)
		var qe *redlock.QuorumError
		var ce *redlock.CounterError
		if !errors.As(err, &qe) || !errors.As(err, &ce) || ce.Value != bad {
			t.Fatalf("%q on three nodes: %v; want a QuorumError with a CounterError", bad, err)
		}
		if _, err := l.Issued(ctx, key); !errors.As(err, &ce) {
			t.Fatalf("Issued with %q on three nodes: %v", bad, err)
		}
		for i, raw := range raws {
			if n, _ := raw.Exists(ctx, prefix+"{"+key+"}").Result(); n != 0 {
				t.Fatalf("%q: node %d holds a lock after the failed acquire", bad, i)
			}
		}
		if err := l.Heal(ctx, key, next); err != nil {
			t.Fatalf("Heal over %q: %v", bad, err)
		}
		if healed := grants(t, ctx, l, key, 1)[0]; healed <= next {
			t.Fatalf("%q healed: token %d after %d", bad, healed, next)
		}
	}
}
