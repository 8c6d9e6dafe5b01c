package tokens

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/token"
)

func client(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

func locker(t *testing.T, c redislock.Client, prefix string, o redislock.Options) *redislock.Locker {
	t.Helper()
	o.Prefix = prefix
	l, err := redislock.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// env is one test's shared Redis, a client and a Locker.
type env struct {
	t      *testing.T
	c      *redis.Client
	l      *redislock.Locker
	prefix string
}

func newEnv(t *testing.T, o redislock.Options) *env {
	t.Helper()
	db := redisserver.Shared(t)
	c := client(t, db.Addr)
	p := db.Prefix + "lk:"
	return &env{t: t, c: c, l: locker(t, c, p, o), prefix: p}
}

func (e *env) lockKey(k string) string { return e.prefix + "{" + k + "}" }
func (e *env) ctrKey(k string) string  { return e.prefix + "{" + k + "}:tok" }

func (e *env) raw(k string) (string, bool) {
	e.t.Helper()
	v, err := e.c.Get(context.Background(), e.ctrKey(k)).Result()
	if errors.Is(err, redis.Nil) {
		return "", false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return v, true
}

func (e *env) set(k, v string) {
	e.t.Helper()
	if err := e.c.Set(context.Background(), e.ctrKey(k), v, time.Hour).Err(); err != nil {
		e.t.Fatal(err)
	}
}

// nowUS is the server clock in µs.
func nowUS(t *testing.T, c *redis.Client) uint64 {
	t.Helper()
	tm, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return uint64(tm.UnixMicro())
}

// parse splits a stored "c" or "c:d".
func parse(t *testing.T, v string) (c, d uint64) {
	t.Helper()
	cs, ds, ok := strings.Cut(v, ":")
	c, err := strconv.ParseUint(cs, 10, 64)
	if err != nil {
		t.Fatalf("stored %q: %v", v, err)
	}
	if ok {
		if d, err = strconv.ParseUint(ds, 10, 64); err != nil {
			t.Fatalf("stored %q: %v", v, err)
		}
	}
	return c, d
}

func tryAcq(t *testing.T, l *redislock.Locker, k string) locks.Lease {
	t.Helper()
	s, err := l.TryAcquire(itest.Ctx(t, 5*time.Second), k, 10*time.Second)
	if err != nil {
		t.Fatalf("TryAcquire %q: %v", k, err)
	}
	return s
}

func release(t *testing.T, s locks.Lease) {
	t.Helper()
	if err := s.Release(itest.Ctx(t, 5*time.Second)); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// TestRedisFastPathKeepsOffset: the acquire's SET ... GET swap on a free
// lock whose counter holds "c:d" (offset present, counter below or above
// now+d) or a bare counter above the clock. Attack: the swap leaves the
// bare clock (offset dropped). Holds: the token is max(c+1, now+d), the key
// ends up "token:d'" with d' >= d and d' >= token − now, never bare.
func TestRedisFastPathKeepsOffset(t *testing.T) {
	e := newEnv(t, redislock.Options{})
	const D = uint64(1e12) // ~11.6 days ahead
	for i, mk := range []func(now uint64) string{
		func(now uint64) string { return "5:" + strconv.FormatUint(D, 10) },                                // c far below now+d
		func(now uint64) string { return strconv.FormatUint(now-1e6, 10) + ":1" },                          // c below clock, tiny d
		func(now uint64) string { return strconv.FormatUint(now+D+5e9, 10) + ":" + "1000" },                // planted c above now+d: c+1 path
		func(now uint64) string { return strconv.FormatUint(now+D, 10) },                                   // bare c above clock: c+1 path
		func(now uint64) string { return strconv.FormatUint(now-1, 10) + ":" + strconv.FormatUint(D, 10) }, // digits before ':' below clock
	} {
		k := fmt.Sprintf("fp%d", i)
		now := nowUS(t, e.c)
		v := mk(now)
		e.set(k, v)
		c0, d0 := parse(t, v)
		s := tryAcq(t, e.l, k)
		after := nowUS(t, e.c)
		tok := uint64(s.Token())
		if tok <= c0 || tok < now+d0 || tok > max(c0+1, after+d0) {
			t.Errorf("%q: token %d, want max(c+1, now+d) in [%d, %d]", v, tok, max(c0+1, now+d0), max(c0+1, after+d0))
		}
		got, ok := e.raw(k)
		if !ok {
			t.Fatalf("%q: counter gone after the grant", v)
		}
		c1, d1 := parse(t, got)
		if c1 != tok || d1 < d0 || (tok > after && d1 < tok-after) {
			t.Errorf("%q: stored %q after granting %d (now %d): want %d:d' with d' >= %d and the floor above the token", v, got, tok, after, tok, d0)
		}
		if d0 > 0 && !strings.Contains(got, ":") {
			t.Errorf("%q: offset dropped: stored %q", v, got)
		}
		release(t, s)
		s2 := tryAcq(t, e.l, k)
		if s2.Token() <= s.Token() {
			t.Errorf("%q: second token %d not above %d", v, s2.Token(), s.Token())
		}
		release(t, s2)
	}
}

var garbage = []string{
	"", "c:", "1:", ":5", ":", "1:2:3", "0", "007", "1:0", "1:00", "1:007", "01:5",
	"99999999999999999999", "9223372036854775808", "1:9223372036854775808",
	"18446744073709551616", "é", "1é", "12a", " 12", "12 ", "-5", "+5", "1e5",
	"0x10", "1.5", "１２", "1:-1", "1: 2", "12\n", "\x00", strings.Repeat("9", 300),
}

func isCounterErr(err error) bool {
	var ce *redislock.CounterError
	return errors.As(err, &ce) && errors.Is(err, token.ErrInvalid)
}

// TestRedisGarbageCounterTyped: every malformed shape gives a
// *CounterError (token.ErrInvalid) from Acquire, TryAcquire, Heal, Issued
// and Current, grants nothing and leaves the value as it was. Attack: a
// shape the fast path's pattern or tonumber accepts, or one the swap
// leaves as the bare clock.
func TestRedisGarbageCounterTyped(t *testing.T) {
	e := newEnv(t, redislock.Options{})
	for i, g := range garbage {
		k := fmt.Sprintf("g%d", i)
		e.set(k, g)
		check := func(what string, err error) {
			t.Helper()
			if !isCounterErr(err) {
				t.Errorf("%q: %s: %v, want a *CounterError", g, what, err)
			}
			if v, ok := e.raw(k); !ok || v != g {
				t.Errorf("%q: after %s the counter holds %q (present %v)", g, what, v, ok)
			}
			if n, _ := e.c.Exists(context.Background(), e.lockKey(k)).Result(); n != 0 {
				t.Errorf("%q: after %s the lock key exists", g, what)
			}
		}
		_, err := e.l.TryAcquire(itest.Ctx(t, 5*time.Second), k, time.Second)
		check("TryAcquire", err)
		_, err = e.l.Acquire(itest.Ctx(t, 5*time.Second), k, time.Second)
		check("Acquire", err)
		_, err = e.l.Heal(itest.Ctx(t, 5*time.Second), k, 10)
		check("Heal", err)
		_, err = e.l.Issued(itest.Ctx(t, 5*time.Second), k)
		check("Issued", err)
		_, err = e.l.Current(itest.Ctx(t, 5*time.Second), k)
		check("Current", err)
	}
}

// TestRedisWrongTypeCounter: a hash or list at the counter's name is a
// WRONGTYPE error from every call, nothing granted, the key untouched.
func TestRedisWrongTypeCounter(t *testing.T) {
	e := newEnv(t, redislock.Options{})
	ctx := itest.Ctx(t, 10*time.Second)
	e.c.HSet(ctx, e.ctrKey("h"), "f", "1")
	e.c.RPush(ctx, e.ctrKey("l"), "1")
	for _, k := range []string{"h", "l"} {
		for what, f := range map[string]func() error{
			"TryAcquire": func() error { _, err := e.l.TryAcquire(ctx, k, time.Second); return err },
			"Acquire":    func() error { _, err := e.l.Acquire(ctx, k, time.Second); return err },
			"Heal":       func() error { _, err := e.l.Heal(ctx, k, 5); return err },
			"Issued":     func() error { _, err := e.l.Issued(ctx, k); return err },
			"Current":    func() error { _, err := e.l.Current(ctx, k); return err },
		} {
			err := f()
			if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Errorf("%s on a %s counter: %v, want WRONGTYPE", what, k, err)
			}
			if n, _ := e.c.Exists(ctx, e.lockKey(k)).Result(); n != 0 {
				t.Errorf("%s on a %s counter left the lock set", what, k)
			}
		}
		if ty, _ := e.c.Type(ctx, e.ctrKey(k)).Result(); (k == "h" && ty != "hash") || (k == "l" && ty != "list") {
			t.Errorf("%s counter now of type %q", k, ty)
		}
	}
}

// queueWaiter starts a blocking Acquire of k and waits until it is queued.
func (e *env) queueWaiter(k string, l *redislock.Locker) <-chan error {
	e.t.Helper()
	done := make(chan error, 1)
	go func() {
		s, err := l.Acquire(context.Background(), k, 10*time.Second)
		if err == nil {
			err = fmt.Errorf("granted %d", s.Token())
			s.Release(context.Background())
		}
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if n, _ := e.c.ZCard(context.Background(), e.lockKey(k)+":q").Result(); n > 0 {
			return done
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.t.Fatal("the waiter never queued")
	return nil
}

// TestRedisReleaseHandOverMalformedCounterWakesWaiters: a holder releases
// while a waiter is queued and the counter holds garbage. The release frees
// the lock and succeeds (nil); the waiter it wakes gets the
// *redislock.CounterError, nothing is granted, and the stored value is left
// as it was, as CounterError's doc says.
func TestRedisReleaseHandOverMalformedCounterWakesWaiters(t *testing.T) {
	e := newEnv(t, redislock.Options{})
	l2 := locker(t, e.c, e.prefix, redislock.Options{})
	s := tryAcq(t, e.l, "rel")
	done := e.queueWaiter("rel", l2)
	e.set("rel", "1:0")
	err := s.Release(itest.Ctx(t, 5*time.Second))
	select {
	case werr := <-done:
		if !isCounterErr(werr) {
			t.Errorf("waiter: %v, want a *CounterError", werr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter never returned")
	}
	if v, _ := e.raw("rel"); v != "1:0" {
		t.Errorf("counter now %q", v)
	}
	if n, _ := e.c.Exists(context.Background(), e.lockKey("rel")).Result(); n != 0 {
		t.Errorf("lock still set after the failed hand-over")
	}
	// A release frees the lock whatever the counter holds and reports
	// that it did; the waiters it wakes get the CounterError (above).
	if err != nil {
		t.Errorf("Release with a waiter queued and a malformed counter: %v, want nil (the lock is freed)", err)
	}
}

func isRange(err error) bool {
	var re *token.RangeError
	return errors.As(err, &re)
}

// TestRedisCeiling: a counter at MaxToken, an offset pushing the floor past
// it, a heal to MaxHeal: the acquire fails with a RangeError, nothing is
// granted, the stored value is unchanged (not the bare clock); a
// hand-over at the ceiling wakes the waiter with the RangeError and frees
// the lock.
func TestRedisCeiling(t *testing.T) {
	e := newEnv(t, redislock.Options{})
	ctx := itest.Ctx(t, 20*time.Second)
	maxs := strconv.FormatUint(uint64(redislock.MaxToken), 10)
	now := nowUS(t, e.c)
	for i, v := range []string{
		maxs,
		"5:" + maxs,
		"5:" + strconv.FormatUint(uint64(redislock.MaxToken)-now, 10), // floor = MaxToken+elapsed
		maxs + ":1",
		strconv.FormatUint(uint64(redislock.MaxToken)-1, 10) + ":" + strconv.FormatUint(uint64(redislock.MaxToken)-now-1, 10),
	} {
		k := fmt.Sprintf("ceil%d", i)
		e.set(k, v)
		for _, f := range []func() error{
			func() error { _, err := e.l.TryAcquire(ctx, k, time.Second); return err },
			func() error { _, err := e.l.Acquire(ctx, k, time.Second); return err },
		} {
			if err := f(); !isRange(err) {
				t.Errorf("%q: %v, want a RangeError", v, err)
			}
			if got, _ := e.raw(k); got != v {
				t.Errorf("%q: counter now %q", v, got)
			}
			if n, _ := e.c.Exists(ctx, e.lockKey(k)).Result(); n != 0 {
				t.Errorf("%q: lock granted", v)
			}
		}
		if is, err := e.l.Issued(ctx, k); err != nil || is != redislock.MaxToken && i != 4 {
			t.Errorf("%q: Issued %d, %v", v, is, err)
		}
	}
	// Heal to MaxHeal: next grant refused, value kept.
	if _, err := e.l.Heal(ctx, "mh", redislock.MaxToken-1); err != nil {
		t.Fatal(err)
	}
	v0, _ := e.raw("mh")
	time.Sleep(2 * time.Millisecond)
	if _, err := e.l.TryAcquire(ctx, "mh", time.Second); !isRange(err) {
		t.Errorf("after Heal(MaxHeal): %v, want RangeError", err)
	}
	if v, _ := e.raw("mh"); v != v0 {
		t.Errorf("after the refused grant: %q, was %q", v, v0)
	}
	if _, err := e.l.Heal(ctx, "mh", redislock.MaxToken); !isRange(err) || !errors.Is(err, locks.ErrInvalidArgument) {
		t.Errorf("Heal(MaxToken): %v", err)
	}
	// Hand-over at the ceiling.
	l2 := locker(t, e.c, e.prefix, redislock.Options{})
	s := tryAcq(t, e.l, "ho")
	done := e.queueWaiter("ho", l2)
	e.set("ho", maxs)
	release(t, s)
	select {
	case err := <-done:
		if !isRange(err) {
			t.Errorf("waiter at the ceiling: %v, want RangeError", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter never returned")
	}
	if v, _ := e.raw("ho"); v != maxs {
		t.Errorf("counter after the refused hand-over: %q", v)
	}
	if n, _ := e.c.Exists(ctx, e.lockKey("ho")).Result(); n != 0 {
		t.Errorf("lock left set after the refused hand-over")
	}
}

// TestRedisNumericEdges: heals to 2^53−1, 2^53, 2^53+1 and near MaxToken:
// the tokens are exact (above the target, strictly increasing), Issued
// and Current agree with them, and the offset is target − now.
func TestRedisNumericEdges(t *testing.T) {
	e := newEnv(t, redislock.Options{})
	ctx := itest.Ctx(t, 20*time.Second)
	for i, tgt := range []uint64{1<<53 - 1, 1 << 53, 1<<53 + 1, 1<<62 + 1, uint64(redislock.MaxToken) - 2e9} {
		k := fmt.Sprintf("n%d", i)
		before := nowUS(t, e.c)
		got, err := e.l.Heal(ctx, k, token.Token(tgt))
		after := nowUS(t, e.c)
		if err != nil || uint64(got) != tgt {
			t.Fatalf("Heal %d: %d, %v", tgt, got, err)
		}
		v, _ := e.raw(k)
		c, d := parse(t, v)
		if c != tgt || d < tgt-after || d > tgt-before {
			t.Errorf("healed to %d: stored %q, want d in [%d, %d]", tgt, v, tgt-after, tgt-before)
		}
		prev := tgt
		for j := 0; j < 5; j++ {
			is, err := e.l.Issued(ctx, k)
			if err != nil || uint64(is) < prev {
				t.Errorf("%d: Issued %d below %d (%v)", tgt, is, prev, err)
			}
			s := tryAcq(t, e.l, k)
			tok := uint64(s.Token())
			if tok <= prev {
				t.Errorf("%d: token %d not above %d", tgt, tok, prev)
			}
			if cur, err := e.l.Current(ctx, k); err != nil || uint64(cur) != tok {
				t.Errorf("%d: Current %d while %d held (%v)", tgt, cur, tok, err)
			}
			if is, err := e.l.Issued(ctx, k); err != nil || uint64(is) < tok {
				t.Errorf("%d: Issued %d below the held %d (%v)", tgt, is, tok, err)
			}
			sv, _ := e.raw(k)
			if c2, _ := parse(t, sv); c2 != tok {
				t.Errorf("%d: stored %q after granting %d", tgt, sv, tok)
			}
			release(t, s)
			prev = tok
		}
	}
	// Exactness through decimal strings: a counter at 2^53+1 exactly (bare
	// "c" above the clock): next is c+1, not a rounded double.
	e.set("x", "9007199254740993") // 2^53+1
	s := tryAcq(t, e.l, "x")
	if s.Token() != 9007199254740994 {
		t.Errorf("from 2^53+1: token %d", s.Token())
	}
	release(t, s)
	e.set("y", strconv.FormatUint(uint64(redislock.MaxToken)-1, 10))
	s = tryAcq(t, e.l, "y")
	if s.Token() != redislock.MaxToken {
		t.Errorf("from MaxToken-1: token %d", s.Token())
	}
	release(t, s)
	if _, err := e.l.TryAcquire(ctx, "y", time.Second); !isRange(err) {
		t.Errorf("after granting MaxToken: %v", err)
	}
}

// TestRedisIssuedAtLeastHeldToken: a healed key's counter idles out under a
// live lease (CounterIdle 1s, lease 5s): Issued and Current are still at
// least the held token.
func TestRedisIssuedAtLeastHeldToken(t *testing.T) {
	e := newEnv(t, redislock.Options{CounterIdle: time.Second})
	ctx := itest.Ctx(t, 20*time.Second)
	now := nowUS(t, e.c)
	if _, err := e.l.Heal(ctx, "i", token.Token(now+1e12)); err != nil {
		t.Fatal(err)
	}
	s, err := e.l.TryAcquire(ctx, "i", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1300 * time.Millisecond)
	if _, ok := e.raw("i"); ok {
		t.Fatal("counter did not idle out")
	}
	if is, err := e.l.Issued(ctx, "i"); err != nil || is < s.Token() {
		t.Errorf("Issued %d below the held token %d (%v)", is, s.Token(), err)
	}
	if cur, err := e.l.Current(ctx, "i"); err != nil || cur != s.Token() {
		t.Errorf("Current %d, held %d (%v)", cur, s.Token(), err)
	}
	release(t, s)
}

// TestRedisConcurrentHealedKeyFence: 6 goroutines acquire (blocking and
// Try) and release one healed key, one more heals it repeatedly to
// Issued+1000: tokens unique and strictly increasing in grant order, a
// MemoryFence admits every holder's claim and never two holders at once.
func TestRedisConcurrentHealedKeyFence(t *testing.T) {
	e := newEnv(t, redislock.Options{})
	ctx := itest.Ctx(t, 25*time.Second)
	now := nowUS(t, e.c)
	if _, err := e.l.Heal(ctx, "cc", token.Token(now+5e11)); err != nil {
		t.Fatal(err)
	}
	var fence token.MemoryFence
	fence.Check = token.NoCheck()
	var (
		mu     sync.Mutex
		seen   = map[token.Token]bool{}
		last   token.Token
		inside atomic.Int32
		grants atomic.Int32
	)
	stop := time.Now().Add(5 * time.Second)
	var wg sync.WaitGroup
	for g := 0; g < 6; g++ {
		l := locker(t, e.c, e.prefix, redislock.Options{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				var s locks.Lease
				var err error
				if i%3 == 0 {
					s, err = l.TryAcquire(ctx, "cc", 2*time.Second)
					if errors.Is(err, locks.ErrNotObtained) {
						continue
					}
				} else {
					s, err = l.Acquire(ctx, "cc", 2*time.Second)
				}
				if err != nil {
					t.Errorf("acquire: %v", err)
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d holders at once", n)
				}
				tok := s.Token()
				mu.Lock()
				if seen[tok] || tok <= last {
					t.Errorf("token %d after %d (seen %v)", tok, last, seen[tok])
				}
				seen[tok], last = true, tok
				mu.Unlock()
				if err := fence.Claim(ctx, "r", tok); err != nil {
					t.Errorf("claim %d: %v", tok, err)
				}
				grants.Add(1)
				inside.Add(-1)
				if err := s.Release(ctx); err != nil {
					t.Errorf("release: %v", err)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for time.Now().Before(stop) {
			is, err := e.l.Issued(ctx, "cc")
			if err == nil {
				_, err = e.l.Heal(ctx, "cc", is+1000)
			}
			if err != nil {
				t.Errorf("heal: %v", err)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	wg.Wait()
	t.Logf("%d grants", grants.Load())
	if grants.Load() < 20 {
		t.Errorf("only %d grants", grants.Load())
	}
}

// TestRedisAbandonedAcquiresOnHealedKey: Acquires queued behind a holder of
// a healed key give up (their contexts end) at random moments around the
// release: the lock never stays stuck with an orphan grant past a short
// wait, and the tokens keep growing.
func TestRedisAbandonedAcquiresOnHealedKey(t *testing.T) {
	e := newEnv(t, redislock.Options{WaiterTTL: 300 * time.Millisecond})
	ctx := itest.Ctx(t, 25*time.Second)
	if _, err := e.l.Heal(ctx, "ab", token.Token(nowUS(t, e.c)+1e11)); err != nil {
		t.Fatal(err)
	}
	l2 := locker(t, e.c, e.prefix, redislock.Options{WaiterTTL: 300 * time.Millisecond})
	var prev token.Token
	for i := 0; i < 15; i++ {
		s := tryAcq(t, e.l, "ab")
		if s.Token() <= prev {
			t.Errorf("token %d after %d", s.Token(), prev)
		}
		prev = s.Token()
		wctx, cancel := context.WithTimeout(ctx, time.Duration(40+i*3)*time.Millisecond)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if w, err := l2.Acquire(wctx, "ab", 5*time.Second); err == nil {
				if w.Token() <= prev {
					t.Errorf("handed token %d after %d", w.Token(), prev)
				}
				prev = w.Token()
				w.Release(ctx)
			}
		}()
		time.Sleep(40 * time.Millisecond)
		release(t, s)
		<-done
		cancel()
		// The lock must be free again within a short time (abandon
		// hands on an orphan grant).
		deadline := time.Now().Add(3 * time.Second)
		for {
			n, _ := e.c.Exists(ctx, e.lockKey("ab")).Result()
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: lock still held 3 s after everyone left", i)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestRedisFailoverLosesHealedGrantTokenGrows: a healed key (d large),
// replication cut, a grant only the old master saw, the replica promoted:
// the next token is larger than the lost one, never equal.
func TestRedisFailoverLosesHealedGrantTokenGrows(t *testing.T) {
	m := redisserver.New(t)
	r := redisserver.NewReplica(t, m)
	cm, cr := client(t, m.Addr()), client(t, r.Replica.Addr())
	ctx := itest.Ctx(t, 25*time.Second)
	const p = "fo:"
	lm := locker(t, cm, p, redislock.Options{})
	if _, err := lm.Heal(ctx, "k", token.Token(nowUS(t, cm)+1e12)); err != nil {
		t.Fatal(err)
	}
	s := tryAcq(t, lm, "k")
	release(t, s)
	if err := r.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Link.Cut(); err != nil {
		t.Fatal(err)
	}
	var lost token.Token
	for i := 0; i < 3; i++ { // several lost grants, the last the highest
		s = tryAcq(t, lm, "k")
		lost = s.Token()
		release(t, s)
	}
	if err := r.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	lr := locker(t, cr, p, redislock.Options{})
	if is, err := lr.Issued(ctx, "k"); err != nil || is < lost {
		t.Errorf("Issued on the new master %d, below the lost grant %d (%v)", is, lost, err)
	}
	s = tryAcq(t, lr, "k")
	if s.Token() <= lost {
		t.Errorf("new master's token %d not above the lost grant %d", s.Token(), lost)
	}
}

// TestRedisHandOverKeepsOffset: releases that hand a healed key's lock to a
// queued waiter mint max(c+1, now+d) and keep the offset in the stored
// value; the waiter's token is above the releaser's and the stored one.
func TestRedisHandOverKeepsOffset(t *testing.T) {
	e := newEnv(t, redislock.Options{})
	ctx := itest.Ctx(t, 20*time.Second)
	if _, err := e.l.Heal(ctx, "hk", token.Token(nowUS(t, e.c)+1e12)); err != nil {
		t.Fatal(err)
	}
	l2 := locker(t, e.c, e.prefix, redislock.Options{})
	s := tryAcq(t, e.l, "hk")
	for i := 0; i < 5; i++ {
		got := make(chan locks.Lease, 1)
		go func() {
			w, err := l2.Acquire(ctx, "hk", 10*time.Second)
			if err != nil {
				t.Errorf("waiter: %v", err)
			}
			got <- w
		}()
		for {
			if n, _ := e.c.ZCard(ctx, e.lockKey("hk")+":q").Result(); n > 0 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		_, d0 := parse(t, mustRaw(t, e, "hk"))
		release(t, s)
		w := <-got
		if w == nil {
			t.FailNow()
		}
		v := mustRaw(t, e, "hk")
		c1, d1 := parse(t, v)
		if w.Token() <= s.Token() || uint64(w.Token()) != c1 || d1 < d0 || d0 == 0 {
			t.Errorf("hand-over: %d after %d, stored %q (offset was %d)", w.Token(), s.Token(), v, d0)
		}
		// the next holder hands back.
		s = w
		e.l, l2 = l2, e.l
	}
	release(t, s)
}

func mustRaw(t *testing.T, e *env, k string) string {
	t.Helper()
	v, ok := e.raw(k)
	if !ok {
		t.Fatalf("counter of %q gone", k)
	}
	return v
}
