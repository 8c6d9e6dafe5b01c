package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/token"
)

// grants takes key n times, alternately by a plain acquire and by a
// hand-over to a queued waiter (another locker: another process), and
// returns the tokens in grant order, checking Issued after each.
func grants(t *testing.T, ctx context.Context, a, b *redislock.Locker, c *redis.Client, prefix, key string, n int) []token.Token {
	t.Helper()
	var toks []token.Token
	issued := func(tok token.Token) {
		t.Helper()
		if is, err := a.Issued(ctx, key); err != nil || is < tok {
			t.Fatalf("Issued = %d, %v after granting %d", is, err, tok)
		}
	}
	for len(toks) < n {
		h, err := a.Acquire(ctx, key, time.Minute)
		if err != nil {
			t.Fatalf("grant %d: %v", len(toks), err)
		}
		toks = append(toks, h.Token())
		issued(h.Token())
		got := make(chan acquired, 1)
		go func() {
			l, err := b.Acquire(ctx, key, time.Minute)
			got <- acquired{l, err}
		}()
		waitFor(t, func() bool { return c.ZCard(ctx, prefix+"{"+key+"}:q").Val() == 1 })
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		w := <-got
		if w.err != nil {
			t.Fatalf("hand-over %d: %v", len(toks), w.err)
		}
		toks = append(toks, w.lease.Token())
		issued(w.lease.Token())
		if err := w.lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return toks
}

// serverMicros reads the server's clock in µs.
func serverMicros(t *testing.T, ctx context.Context, c *redis.Client) token.Token {
	t.Helper()
	tm, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	return token.Token(tm.UnixMicro())
}

// healedGrants heals key to target, grants it n times (acquires and
// hand-overs) and checks the tokens: strictly increasing, above target,
// and each exactly the server clock at its grant plus the heal offset d
// (d = target − the clock at the heal, stored in the offset key): the
// token minus d lies within the server clock before and after the grants.
func healedGrants(t *testing.T, ctx context.Context, a, b *redislock.Locker, c *redis.Client, prefix, key string, target token.Token, n int) {
	t.Helper()
	before := serverMicros(t, ctx, c)
	if got, err := a.Heal(ctx, key, target); err != nil || got != target {
		t.Fatalf("Heal(%d) = %d, %v", target, got, err)
	}
	ckey := prefix + "{" + key + "}:tok" // "counter:offset"
	offsetOf := func() string { _, d, _ := strings.Cut(c.Get(ctx, ckey).Val(), ":"); return d }
	ds := offsetOf()
	d, err := token.Parse(ds)
	if err != nil || d == 0 || target-d < before {
		t.Fatalf("offset %q after Heal(%d) at server time ≥ %d: want target − the heal's clock", ds, target, before)
	}
	toks := grants(t, ctx, a, b, c, prefix, key, n)
	after := serverMicros(t, ctx, c)
	for i, tok := range toks {
		if tok <= target || (i > 0 && tok <= toks[i-1]) {
			t.Fatalf("healed to %d: tokens %v not strictly increasing above it", target, toks)
		}
		if at := tok - d; at < before || at > after {
			t.Errorf("grant %d: token %d − offset %d = %d, not a server clock reading in [%d, %d]", i, tok, d, at, before, after)
		}
	}
	if got := offsetOf(); got != ds {
		t.Errorf("offset %q after the grants, want %q unchanged (every token came from the clock floor)", got, ds)
	}
	is, err := a.Issued(ctx, key)
	if err != nil || is < toks[len(toks)-1] || is-d > serverMicros(t, ctx, c) {
		t.Fatalf("Issued = %d, %v; want at least the last token %d and at most the floor now", is, err, toks[len(toks)-1])
	}
}

// The reproduction: healed to 2^53−2, successive grants got
// …991, …992, …992, …992 in Lua doubles. Healed tokens are the server
// clock plus the heal offset, in decimal strings: every grant, by acquire
// or hand-over, gets a distinct, strictly larger token, exactly the clock
// plus the offset — past 2^53 and just below the ceiling, where a double's
// neighbours are 2^10 apart. (The digit arithmetic itself is checked
// exactly, with a chosen clock, in TestMintOffsetEdges and
// TestDecimalAddSubExact.)
func TestTokensExactPast2To53(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	c := newClient(t, db.Addr)
	a := newLocker(t, c, redislock.Options{Prefix: db.Prefix})
	b := newLocker(t, newClient(t, db.Addr), redislock.Options{Prefix: db.Prefix})
	ctx := ctxFor(t, time.Minute)
	healedGrants(t, ctx, a, b, c, db.Prefix, "k", 1<<53-2, 8)
	// Higher up; 2^26 µs (67 s) of clock left below the ceiling.
	healedGrants(t, ctx, a, b, c, db.Prefix, "k", 1<<63-1<<26, 4)
}

// At the ceiling: a counter at MaxToken−1 with no offset (a clock stepped
// back below it) lets exactly one more grant through, with MaxToken; the
// next, by acquire or by hand-over, fails with a RangeError and leaves
// nothing granted or queued; Heal refuses the ceiling. Deleting the
// counter and its offset is the way back.
func TestTokenCeiling(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	c := newClient(t, db.Addr)
	a := newLocker(t, c, redislock.Options{Prefix: db.Prefix})
	b := newLocker(t, newClient(t, db.Addr), redislock.Options{Prefix: db.Prefix})
	ctx := ctxFor(t, time.Minute)
	lockKey, queue, counter := db.Prefix+"{k}", db.Prefix+"{k}:q", db.Prefix+"{k}:tok"
	rangeErr := func(what string, err error) {
		t.Helper()
		var re *token.RangeError
		if !errors.As(err, &re) || !errors.Is(err, token.ErrRange) || re.Max != redislock.MaxToken {
			t.Fatalf("%s = %v, want a RangeError with Max %d", what, err, redislock.MaxToken)
		}
	}

	var re *token.RangeError
	for _, to := range []token.Token{redislock.MaxToken, redislock.MaxToken + 1, 1<<64 - 1} {
		if _, err := a.Heal(ctx, "k", to); !errors.Is(err, locks.ErrInvalidArgument) || !errors.As(err, &re) {
			t.Fatalf("Heal(%d) = %v, want ErrInvalidArgument and a RangeError", to, err)
		}
	}
	if n := c.Exists(ctx, counter).Val(); n != 0 {
		t.Fatal("a refused Heal wrote the counter")
	}
	if err := c.Set(ctx, counter, (redislock.MaxToken - 1).String(), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	h, err := a.Acquire(ctx, "k", time.Minute)
	if err != nil || h.Token() != redislock.MaxToken {
		t.Fatalf("the grant after the counter at MaxToken-1: %v, %v; want token %d", h, err, redislock.MaxToken)
	}
	if is, err := a.Issued(ctx, "k"); err != nil || is != redislock.MaxToken {
		t.Fatalf("Issued = %d, %v", is, err)
	}
	// A waiter queued behind the last possible grant: the release cannot
	// hand over, frees the lock, and the waiter's acquire fails.
	got := make(chan acquired, 1)
	go func() {
		l, err := b.Acquire(ctx, "k", time.Minute)
		got <- acquired{l, err}
	}()
	waitFor(t, func() bool { return c.ZCard(ctx, queue).Val() == 1 })
	if err := h.Release(ctx); err != nil {
		t.Fatalf("release of the grant at the ceiling: %v", err)
	}
	w := <-got
	rangeErr("the hand-over past the ceiling", w.err)
	if c.Exists(ctx, lockKey).Val() != 0 || c.ZCard(ctx, queue).Val() != 0 {
		t.Fatalf("after the failed hand-over: lock %q, queue %v", c.Get(ctx, lockKey).Val(), c.ZRange(ctx, queue, 0, -1).Val())
	}
	_, err = a.Acquire(ctx, "k", time.Minute)
	rangeErr("Acquire past the ceiling", err)
	_, err = a.TryAcquire(ctx, "k", time.Minute)
	rangeErr("TryAcquire past the ceiling", err)
	if c.Exists(ctx, lockKey).Val() != 0 {
		t.Fatalf("a refused acquire left the lock granted: %q", c.Get(ctx, lockKey).Val())
	}
	if got, err := a.Heal(ctx, "k", 5); err != nil || got != redislock.MaxToken {
		t.Fatalf("Heal(5) at the ceiling = %d, %v; want the counter unchanged", got, err)
	}
	// The operator's way back: delete the counter key, offset included
	// (and reset the marks the high tokens left; see docs/design.md,
	// "redislock"). The next token comes from the clock.
	if err := c.Del(ctx, counter).Err(); err != nil {
		t.Fatal(err)
	}
	l, err := a.Acquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatalf("Acquire after deleting the counter: %v", err)
	}
	if now := token.Token(time.Now().UnixMicro()); l.Token() > now+token.Token(time.Hour.Microseconds()) {
		t.Errorf("token %d after deleting the counter, want the clock's", l.Token())
	}
	_ = l.Release(ctx)
}

// A counter that holds something else than a token (written by hand) is
// never read as a number: acquires fail with an error and grant nothing;
// Heal, Issued and Current fail too.
func TestCorruptCounterFailsClosed(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	c := newClient(t, db.Addr)
	l := newLocker(t, c, redislock.Options{Prefix: db.Prefix})
	ctx := ctxFor(t, time.Minute)
	for _, bad := range []string{"abc", "-5", "0", "007", "1e9", "9223372036854775808", " 5"} {
		if err := c.Set(ctx, db.Prefix+"{k}:tok", bad, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if lease, err := l.TryAcquire(ctx, "k", time.Second); err == nil {
			t.Fatalf("counter %q: granted token %d", bad, lease.Token())
		}
		if n := c.Exists(ctx, db.Prefix+"{k}").Val(); n != 0 {
			t.Fatalf("counter %q: the lock was left granted", bad)
		}
		if got, err := l.Heal(ctx, "k", 10); err == nil {
			t.Errorf("counter %q: Heal = %d", bad, got)
		}
		if got, err := l.Issued(ctx, "k"); err == nil {
			t.Errorf("counter %q: Issued = %d", bad, got)
		}
		if got, err := l.Current(ctx, "k"); err == nil {
			t.Errorf("counter %q: Current = %d", bad, got)
		}
	}
}

// Renew and Release act only on the very grant they belong to: the lock's
// value names it by id and token, so a lease whose id holds the lock under
// another token (a later grant to the same waiting Acquire) neither
// extends nor frees it.
func TestRenewReleaseNeedTheExactGrant(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	c := newClient(t, db.Addr)
	l := newLocker(t, c, redislock.Options{Prefix: db.Prefix})
	ctx := ctxFor(t, time.Minute)
	lease, err := l.Acquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	lockKey := db.Prefix + "{k}"
	v := c.Get(ctx, lockKey).Val()
	id, tok, ok := strings.Cut(v, "|")
	if !ok || tok != lease.Token().String() {
		t.Fatalf("lock value %q, want \"id|%d\"", v, lease.Token())
	}
	if cur, err := l.Current(ctx, "k"); err != nil || cur != lease.Token() {
		t.Fatalf("Current = %d, %v; want the holder's %d", cur, err, lease.Token())
	}
	other := id + "|" + (lease.Token() + 7).String()
	if err := c.Set(ctx, lockKey, other, redis.KeepTTL).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lease.Renew(ctx); !errors.Is(err, locks.ErrNotHeld) {
		t.Errorf("Renew of a grant the lock no longer holds = %v, want ErrNotHeld", err)
	}
	if err := lease.Release(ctx); !errors.Is(err, locks.ErrNotHeld) {
		t.Errorf("Release of a grant the lock no longer holds = %v, want ErrNotHeld", err)
	}
	if got := c.Get(ctx, lockKey).Val(); got != other {
		t.Fatalf("lock %q after the stale release, want %q untouched", got, other)
	}
	if cur, err := l.Current(ctx, "k"); err != nil || cur != lease.Token()+7 {
		t.Fatalf("Current = %d, %v; want the lock's %d", cur, err, lease.Token()+7)
	}
	c.Del(ctx, lockKey)
}

// A healed key near the ceiling: its tokens run d = target − the heal's
// clock ahead of the clock, so they reach MaxToken (MaxToken − target) µs
// after the heal, and grants then fail with a RangeError (rather than
// mint a token a lost grant may have had: see TestHealedTokenGrowsAcrossLostGrant).
// Healed to MaxHeal, the very next grant is refused; Issued and Current
// stay at MaxToken; deleting the counter and the offset is the way back.
func TestHealOffsetCeiling(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	c := newClient(t, db.Addr)
	l := newLocker(t, c, redislock.Options{Prefix: db.Prefix})
	ctx := ctxFor(t, time.Minute)
	counter := db.Prefix + "{k}:tok"

	// Two seconds of clock left: one grant below the ceiling, then none.
	target := redislock.MaxToken - 2_000_000
	if _, err := l.Heal(ctx, "k", target); err != nil {
		t.Fatal(err)
	}
	h, err := l.Acquire(ctx, "k", time.Minute)
	if err != nil || h.Token() <= target {
		t.Fatalf("the grant after Heal(MaxToken − 2s): %v, %v", h, err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2100 * time.Millisecond)
	for _, what := range []string{"two seconds later", "Heal(MaxHeal)"} {
		if what == "Heal(MaxHeal)" {
			if _, err := l.Heal(ctx, "k", (redislock.MaxToken - 1)); err != nil {
				t.Fatal(err)
			}
		}
		_, err = l.TryAcquire(ctx, "k", time.Minute)
		var re *token.RangeError
		if !errors.As(err, &re) || re.Max != redislock.MaxToken {
			t.Fatalf("%s: TryAcquire = %v, want a RangeError", what, err)
		}
		if c.Exists(ctx, db.Prefix+"{k}").Val() != 0 {
			t.Fatalf("%s: a refused acquire left the lock granted", what)
		}
		if is, err := l.Issued(ctx, "k"); err != nil || is != redislock.MaxToken {
			t.Fatalf("%s: Issued = %d, %v; want MaxToken", what, is, err)
		}
		if cur, err := l.Current(ctx, "k"); err != nil || cur != redislock.MaxToken {
			t.Fatalf("%s: Current = %d, %v; want MaxToken", what, cur, err)
		}
	}
	if err := c.Del(ctx, counter).Err(); err != nil {
		t.Fatal(err)
	}
	h, err = l.Acquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatalf("Acquire after deleting the counter and the offset: %v", err)
	}
	if now := token.Token(time.Now().UnixMicro()); h.Token() > now+token.Token(time.Hour.Microseconds()) {
		t.Errorf("token %d after deleting the counter and the offset, want the clock's", h.Token())
	}
	_ = h.Release(ctx)
}

// A lossy failover, on one node: after a heal above the clock, a
// grant is lost (the counter, the offset and the lock put back as they
// were before it, as a replica that had not received it has them) and
// the key is granted again. The second token is above the lost one: it
// comes from the clock plus the heal offset, and the clock moved on.
// Control: the same with the offset stripped by hand — the second grant
// repeats the lost grant's token, and a fence admits both holders.
func TestHealedTokenGrowsAcrossLostGrant(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	c := newClient(t, db.Addr)
	l := newLocker(t, c, redislock.Options{Prefix: db.Prefix})
	ctx := ctxFor(t, time.Minute)
	for _, withOffset := range []bool{true, false} {
		key := fmt.Sprint("lost-", withOffset)
		lockKey, counter := db.Prefix+"{"+key+"}", db.Prefix+"{"+key+"}:tok" // counter: "c:d" after the heal
		target := token.Token(time.Now().Add(time.Minute).UnixMicro())       // a mark above the clock
		if _, err := l.Heal(ctx, key, target); err != nil {
			t.Fatal(err)
		}
		if !withOffset {
			v, _, _ := strings.Cut(c.Get(ctx, counter).Val(), ":")
			c.Set(ctx, counter, v, time.Hour)
		}
		// What the replica has: the state after the heal.
		snap := map[string]string{}
		for _, k := range []string{counter} {
			if v, err := c.Get(ctx, k).Result(); err == nil {
				snap[k] = v
			}
		}
		a, err := l.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		fence := &token.MemoryFence{}
		if err := fence.Claim(ctx, "res", a.Token()); err != nil {
			t.Fatal(err)
		}
		// The failover loses A's grant.
		c.Del(ctx, lockKey, counter)
		for k, v := range snap {
			c.Set(ctx, k, v, time.Hour)
		}
		time.Sleep(time.Millisecond)
		b, err := l.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("offset kept %v: lost grant's token %d, the next grant's %d", withOffset, a.Token(), b.Token())
		bErr := fence.Claim(ctx, "res", b.Token())
		aErr := fence.Claim(ctx, "res", a.Token())
		if withOffset {
			if b.Token() <= a.Token() || bErr != nil || aErr == nil {
				t.Errorf("the grant after the lost one got token %d (lost %d): B's claim %v, A's claim after it %v; want B larger and A refused", b.Token(), a.Token(), bErr, aErr)
			}
		} else if b.Token() != a.Token() || bErr != nil || aErr != nil {
			t.Errorf("control: without the offset the next grant got %d (lost %d), claims B %v, A %v; want the lost token repeated and both admitted", b.Token(), a.Token(), bErr, aErr)
		}
		_ = b.Release(ctx)
	}
}
