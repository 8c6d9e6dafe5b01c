package redislock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/internal/servers"
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

// The reproduction: healed to 2^53−2, successive grants got
// …991, …992, …992, …992 in Lua doubles. Every grant, by acquire or
// hand-over, must get the next integer exactly.
func TestTokensExactPast2To53(t *testing.T) {
	db := servers.Redis(t)
	c := newClient(t, db.Addr)
	a := newLocker(t, c, redislock.Options{Prefix: db.Prefix})
	b := newLocker(t, newClient(t, db.Addr), redislock.Options{Prefix: db.Prefix})
	ctx := ctxFor(t, time.Minute)
	const start = 1<<53 - 2
	if got, err := a.Heal(ctx, "k", start); err != nil || got != start {
		t.Fatalf("Heal(2^53-2) = %d, %v", got, err)
	}
	toks := grants(t, ctx, a, b, c, db.Prefix, "k", 8)
	for i, tok := range toks {
		if want := token.Token(start + 1 + i); tok != want {
			t.Fatalf("grant %d got token %d, want %d (tokens %v)", i, tok, want, toks)
		}
	}
	if is, err := a.Issued(ctx, "k"); err != nil || is != toks[len(toks)-1] {
		t.Fatalf("Issued = %d, %v; want exactly the last token %d", is, err, toks[len(toks)-1])
	}
	// Higher up, where a double's neighbours are 2^11 apart.
	const high = 1<<63 - 1<<20
	if _, err := a.Heal(ctx, "k", high); err != nil {
		t.Fatal(err)
	}
	for i, tok := range grants(t, ctx, a, b, c, db.Prefix, "k", 4) {
		if want := token.Token(high + 1 + i); tok != want {
			t.Fatalf("grant %d after Heal(%d) got token %d, want %d", i, uint64(high), tok, want)
		}
	}
}

// At the ceiling: Heal(MaxToken−1) lets exactly one more grant through,
// with MaxToken; the next, by acquire or by hand-over, fails with a
// RangeError and leaves nothing granted or queued; Heal refuses the
// ceiling. Deleting the counter is the way back.
func TestTokenCeiling(t *testing.T) {
	db := servers.Redis(t)
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
		if _, err := a.Heal(ctx, "k", to); !errors.Is(err, locks.ErrInvalid) || !errors.As(err, &re) {
			t.Fatalf("Heal(%d) = %v, want ErrInvalid and a RangeError", to, err)
		}
	}
	if n := c.Exists(ctx, counter).Val(); n != 0 {
		t.Fatal("a refused Heal wrote the counter")
	}
	if got, err := a.Heal(ctx, "k", redislock.MaxHeal); err != nil || got != redislock.MaxToken-1 {
		t.Fatalf("Heal(MaxHeal) = %d, %v", got, err)
	}
	h, err := a.Acquire(ctx, "k", time.Minute)
	if err != nil || h.Token() != redislock.MaxToken {
		t.Fatalf("the grant after Heal(MaxToken-1): %v, %v; want token %d", h, err, redislock.MaxToken)
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
	// The operator's way back: delete the counter (and reset the marks
	// the high tokens left; see the package doc). The next token comes
	// from the clock.
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
	db := servers.Redis(t)
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
	db := servers.Redis(t)
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
