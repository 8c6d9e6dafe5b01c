package tokens

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/token"
)

// nowMicros is the server's clock in µs (TIME), the clock floor's base.
func nowMicros(t *testing.T, ctx context.Context, c redis.Cmdable) token.Token {
	t.Helper()
	tm, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	return token.Token(tm.UnixMicro())
}

func newClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

func newLocker(t *testing.T, c redislock.Client, o redislock.Options) *redislock.Locker {
	t.Helper()
	l, err := redislock.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// healFailover is the shared body of the heal-across-failover tests, on a
// master and a replica that reaches it through a proxy: heal the key far
// above the clock, optionally lose the offset key alone (as a maxmemory
// eviction policy that evicts volatile keys one by one, or an operator who
// deleted one of the two keys, would), let it replicate, cut replication,
// grant once on the master (lost to the replica), promote the replica, and
// grant there. It returns both tokens and whether a fence admitted both.
func healFailover(t *testing.T, dropOffset bool) (t1, t2 token.Token, bothAdmitted bool) {
	ctx := itest.Ctx(t, 30*time.Second)
	m := redisserver.New(t)
	r := redisserver.NewReplica(t, m)
	mc := newClient(t, m.Addr())
	prefix := "r19b:"
	key := "healed"
	lm := newLocker(t, mc, redislock.Options{Prefix: prefix})

	h := nowMicros(t, ctx, mc) + 1_000_000_000_000 // ~11.6 days ahead of the clock
	if _, err := lm.Heal(ctx, key, h); err != nil {
		t.Fatal(err)
	}
	if dropOffset {
		// The offset lives in the counter's key ("counter:offset"):
		// strip it by hand.
		ck := prefix + "{" + key + "}:tok"
		v, _, _ := strings.Cut(mc.Get(ctx, ck).Val(), ":")
		if err := mc.Set(ctx, ck, v, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Link.Cut(); err != nil {
		t.Fatal(err)
	}
	fence := &token.MemoryFence{Check: token.NoCheck()}
	l1, err := lm.TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t1 = l1.Token()
	if err := fence.Claim(ctx, "res", t1); err != nil {
		t.Fatalf("first holder refused: %v", err)
	}
	// Failover: the replica, which never saw the grant, becomes the
	// master; the first holder still believes it holds the lock.
	if err := r.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	rc := newClient(t, r.Replica.Addr())
	lr := newLocker(t, rc, redislock.Options{Prefix: prefix})
	l2, err := lr.TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t2 = l2.Token()
	err2 := fence.Claim(ctx, "res", t2)
	err1 := fence.Claim(ctx, "res", t1) // the stale holder writes again
	t.Logf("healed to %d; lost grant %d; after failover %d; second claim %v; stale holder's next claim %v", h, t1, t2, err2, err1)
	return t1, t2, err2 == nil && err1 == nil
}

// TestRedisOffsetStrippedRepeatsTokenAcrossFailover is the control of
// TestRedisHealedTokenGrowsAcrossFailover: the same failover that loses a
// grant, with the heal offset stripped from the counter's value by hand
// (eviction or expiry can no longer take one without the other: they share
// a key, see TestRedisEvictionKeepsOffsetWithCounter). The next grant then
// comes from counter + 1, the lost grant's token again, and a fence admits
// both holders: the failover bites, and the offset is what stops it.
func TestRedisOffsetStrippedRepeatsTokenAcrossFailover(t *testing.T) {
	t1, t2, both := healFailover(t, true)
	if t2 != t1 || !both {
		t.Errorf("control: offset stripped, lost grant %d, next %d, both admitted %v; want the token repeated and both admitted", t1, t2, both)
	}
}

// TestRedisHealedTokenGrowsAcrossFailover is the control: with the offset key
// intact, the promoted replica's floor (its clock + offset) is above the
// lost grant and the stale holder is refused once the new one wrote.
func TestRedisHealedTokenGrowsAcrossFailover(t *testing.T) {
	t1, t2, both := healFailover(t, false)
	if t2 <= t1 || both {
		t.Errorf("lost grant %d, next %d, both admitted %v", t1, t2, both)
	}
}

// TestRedisHealCeiling: targets at and above MaxToken are refused typed;
// a heal to MaxHeal leaves at most one more grant (MaxToken) and then
// typed range errors, nothing held; Issued and Current report the ceiling
// exactly.
func TestRedisHealCeiling(t *testing.T) {
	ctx := itest.Ctx(t, 20*time.Second)
	db := redisserver.Shared(t)
	c := newClient(t, db.Addr)
	l := newLocker(t, c, redislock.Options{Prefix: db.Prefix})
	for _, to := range []token.Token{redislock.MaxToken, redislock.MaxToken + 1, ^token.Token(0)} {
		_, err := l.Heal(ctx, "ceil", to)
		var re *token.RangeError
		if !errors.Is(err, locks.ErrInvalidArgument) || !errors.As(err, &re) {
			t.Errorf("Heal(%d) = %v, want ErrInvalid and a RangeError", to, err)
		}
	}
	got, err := l.Heal(ctx, "ceil", redislock.MaxToken-1)
	if err != nil || got != redislock.MaxToken-1 {
		t.Fatalf("Heal(MaxHeal) = %d, %v", got, err)
	}
	if b, err := l.Issued(ctx, "ceil"); err != nil || b != redislock.MaxToken {
		t.Errorf("Issued after heal to MaxHeal = %d, %v; want MaxToken (the floor is past it)", b, err)
	}
	grants := 0
	for i := range 3 {
		le, err := l.TryAcquire(ctx, "ceil", time.Second)
		if err == nil {
			grants++
			if le.Token() != redislock.MaxToken {
				t.Errorf("grant %d near the ceiling has token %d", i, le.Token())
			}
			_ = le.Release(ctx)
			continue
		}
		var re *token.RangeError
		if !errors.As(err, &re) || !errors.Is(err, token.ErrRange) {
			t.Errorf("TryAcquire at the ceiling: %v, want a RangeError", err)
		}
	}
	if grants > 1 {
		t.Errorf("%d grants at the ceiling", grants)
	}
	// Nothing left granted: the lock key is absent.
	if n, err := c.Exists(ctx, db.Prefix+"{ceil}").Result(); err != nil || n != 0 {
		t.Errorf("lock key exists after refused grants: %d %v", n, err)
	}
	if cur, err := l.Current(ctx, "ceil"); err != nil || cur != redislock.MaxToken {
		t.Errorf("Current = %d, %v", cur, err)
	}
	// A blocking Acquire must fail the same way, not wait.
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = l.Acquire(actx, "ceil", time.Second)
	if !errors.Is(err, token.ErrRange) || actx.Err() != nil {
		t.Errorf("Acquire at the ceiling: %v (ctx %v)", err, actx.Err())
	}
}

// TestRedisHealExactAbove2to53: tokens above 2^53 stay exact: odd heal
// targets come back as given, and tokens, Issued and Current agree to the
// unit and keep growing.
func TestRedisHealExactAbove2to53(t *testing.T) {
	ctx := itest.Ctx(t, 20*time.Second)
	db := redisserver.Shared(t)
	c := newClient(t, db.Addr)
	l := newLocker(t, c, redislock.Options{Prefix: db.Prefix})
	for i, to := range []token.Token{1<<53 + 1, 1<<60 + 3, redislock.MaxToken - 1_000_000_007} {
		key := "exact" + strconv.Itoa(i)
		got, err := l.Heal(ctx, key, to)
		if err != nil || got != to {
			t.Fatalf("Heal(%d) = %d, %v", to, got, err)
		}
		s, _ := c.Get(ctx, db.Prefix+"{"+key+"}:tok").Result()
		if s, _, _ = strings.Cut(s, ":"); s != strconv.FormatUint(uint64(to), 10) { // "counter:offset"
			t.Errorf("stored counter %q, want %d", s, to)
		}
		var prev token.Token = to
		for range 20 {
			b0, err := l.Issued(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			le, err := l.TryAcquire(ctx, key, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			tk := le.Token()
			cur, err := l.Current(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			b1, err := l.Issued(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if tk <= prev || cur != tk || b1 < tk || b0 >= tk {
				t.Errorf("key %s: prev %d token %d current %d issued before %d after %d", key, prev, tk, cur, b0, b1)
			}
			prev = tk
			if err := le.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestRedisCorruptCounterTypedError: a counter or offset holding something
// else than a canonical decimal (leading zeros, a sign, hex, empty, past
// MaxToken) makes every acquire fail with a *redislock.CounterError that
// matches token.ErrInvalid, so a caller can tell a corrupt key, which no
// retry heals, from a transient error; nothing is granted.
func TestRedisCorruptCounterTypedError(t *testing.T) {
	ctx := itest.Ctx(t, 20*time.Second)
	db := redisserver.Shared(t)
	c := newClient(t, db.Addr)
	l := newLocker(t, c, redislock.Options{Prefix: db.Prefix})
	cases := []struct{ suffix, val string }{
		{":tok", "007"}, {":tok", "0"}, {":tok", ""}, {":tok", "-5"}, {":tok", "0x10"},
		{":tok", "9223372036854775808"}, {":tok", "1e3"}, {":tok", " 5"},
		// The offset, after the counter in the same key.
		{":tok", "5:00"}, {":tok", "5:-1"}, {":tok", "5:1.5"}, {":tok", "5:9223372036854775808"}, {":tok", "5:01"},
		{":tok", "5:"}, {":tok", ":5"}, {":tok", "5:5:5"},
	}
	for i, tc := range cases {
		key := "corrupt" + strconv.Itoa(i)
		if err := c.Set(ctx, db.Prefix+"{"+key+"}"+tc.suffix, tc.val, 0).Err(); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("%s=%q", tc.suffix, tc.val)
		le, err := l.TryAcquire(ctx, key, time.Second)
		if err == nil {
			t.Errorf("%s: granted token %d on a corrupt key", name, le.Token())
			continue
		}
		if n, _ := c.Exists(ctx, db.Prefix+"{"+key+"}").Result(); n != 0 {
			t.Errorf("%s: lock key set after a failed acquire", name)
		}
		_, herr := l.Heal(ctx, key, 5)
		_, ierr := l.Issued(ctx, key)
		_, cerr := l.Current(ctx, key)
		var untyped []string
		for _, op := range []struct {
			name string
			err  error
		}{{"TryAcquire", err}, {"Heal", herr}, {"Issued", ierr}, {"Current", cerr}} {
			if op.err == nil {
				t.Errorf("%s: %s succeeded on a corrupt key", name, op.name)
				continue
			}
			if !errors.Is(op.err, locks.ErrInvalidArgument) && !errors.Is(op.err, token.ErrInvalid) && !errors.Is(op.err, token.ErrRange) {
				untyped = append(untyped, op.name)
			}
		}
		if len(untyped) > 0 {
			t.Errorf("%s: errors of %v match no sentinel, e.g. %v", name, untyped, err)
		}
	}
}

// TestRedisIssuedAtLeastHealedTokenAfterIdle: Issued is "an upper bound of
// every token granted for key". A healed key's counter and offset idle out
// together (CounterIdle) under a live lease; Issued still answers at least
// the token held, not the bare clock below it.
func TestRedisIssuedAtLeastHealedTokenAfterIdle(t *testing.T) {
	ctx := itest.Ctx(t, 20*time.Second)
	db := redisserver.Shared(t)
	c := newClient(t, db.Addr)
	l := newLocker(t, c, redislock.Options{Prefix: db.Prefix, CounterIdle: time.Second})
	h := nowMicros(t, ctx, c) + 1_000_000_000_000
	if _, err := l.Heal(ctx, "idle", h); err != nil {
		t.Fatal(err)
	}
	le, err := l.TryAcquire(ctx, "idle", 5*time.Second) // held past CounterIdle
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	b, err := l.Issued(ctx, "idle")
	if err != nil {
		t.Fatal(err)
	}
	cur, _ := l.Current(ctx, "idle")
	if b < le.Token() {
		t.Errorf("Issued = %d below the token %d granted 1.5s ago, still held (Current %d)", b, le.Token(), cur)
	}
	_ = le.Release(ctx)
}

// TestRedisHealRacingAcquire: heals racing acquires and hand-overs on one
// node never make a token repeat or go down, and every token granted after
// a heal returned is above the healed value.
func TestRedisHealRacingAcquire(t *testing.T) {
	ctx := itest.Ctx(t, 25*time.Second)
	db := redisserver.Shared(t)
	c := newClient(t, db.Addr)
	l := newLocker(t, c, redislock.Options{Prefix: db.Prefix})
	base := nowMicros(t, ctx, c)
	type grant struct {
		tok      token.Token
		minHeal  token.Token // largest heal that returned before the acquire was sent
		sentNano int64
	}
	var (
		mu       sync.Mutex
		healed   token.Token
		grants   []grant
		lastTok  token.Token
		failures []string
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			to := base + token.Token(i)*10_000_000_000 // 10 000 s steps ahead of the clock
			if _, err := l.Heal(ctx, "race", to); err != nil {
				mu.Lock()
				failures = append(failures, "heal: "+err.Error())
				mu.Unlock()
				return
			}
			mu.Lock()
			healed = max(healed, to)
			mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	}()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 60 {
				mu.Lock()
				h := healed
				mu.Unlock()
				le, err := l.Acquire(ctx, "race", 2*time.Second)
				if err != nil {
					mu.Lock()
					failures = append(failures, "acquire: "+err.Error())
					mu.Unlock()
					return
				}
				mu.Lock()
				if le.Token() <= lastTok {
					failures = append(failures, fmt.Sprintf("token %d after %d", le.Token(), lastTok))
				}
				lastTok = le.Token()
				grants = append(grants, grant{tok: le.Token(), minHeal: h})
				mu.Unlock()
				if err := le.Release(ctx); err != nil {
					mu.Lock()
					failures = append(failures, "release: "+err.Error())
					mu.Unlock()
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		// wait for the acquirers only, then stop the healer
		for {
			mu.Lock()
			n := len(grants)
			f := len(failures)
			mu.Unlock()
			if n >= 240 || f > 0 || ctx.Err() != nil {
				close(stop)
				close(done)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	<-done
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	for _, g := range grants {
		if g.tok <= g.minHeal {
			t.Errorf("token %d not above the heal %d that returned before its acquire", g.tok, g.minHeal)
		}
	}
	t.Logf("%d grants, healed up to %d", len(grants), healed)
}

// TestRedisCounterLostRefusedAsStale: a healed counter's key lost
// (evicted, deleted; the offset lives in it and goes with it): the next
// token comes from the bare clock, below the healed tokens, and a fence
// that saw the last one refuses it as stale (fails closed, never admits);
// Heal to the mark restores growth, the documented fall-back.
func TestRedisCounterLostRefusedAsStale(t *testing.T) {
	ctx := itest.Ctx(t, 10*time.Second)
	db := redisserver.Shared(t)
	c := newClient(t, db.Addr)
	l := newLocker(t, c, redislock.Options{Prefix: db.Prefix})
	h := nowMicros(t, ctx, c) + 1_000_000_000_000
	if _, err := l.Heal(ctx, "k", h); err != nil {
		t.Fatal(err)
	}
	l1, err := l.TryAcquire(ctx, "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	fence := &token.MemoryFence{Check: token.NoCheck()}
	if err := fence.Claim(ctx, "res", l1.Token()); err != nil {
		t.Fatal(err)
	}
	if err := c.Del(ctx, db.Prefix+"{k}:tok").Err(); err != nil {
		t.Fatal(err)
	}
	l2, err := l.TryAcquire(ctx, "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Claim(ctx, "res", l2.Token()); l2.Token() > l1.Token() || !errors.Is(err, token.ErrStale) {
		t.Errorf("token %d after the counter was lost (the last %d): claim %v; want it lower and refused as stale", l2.Token(), l1.Token(), err)
	}
	_ = l2.Release(ctx)
	if _, err := l.Heal(ctx, "k", l1.Token()); err != nil {
		t.Fatal(err)
	}
	l3, err := l.TryAcquire(ctx, "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Claim(ctx, "res", l3.Token()); err != nil || l3.Token() <= l1.Token() {
		t.Errorf("after Heal to the mark: token %d (mark %d), claim %v", l3.Token(), l1.Token(), err)
	}
}

// TestRedisLostHealRefusedAsStaleThenHealed: a heal and the grant after it
// both lost with a failover: the new master's token falls back to its
// clock, below the lost grant's; the fence refuses it as stale (safe),
// the holder heals to the StaleError's mark and the next grant is admitted
// and locks the stale holder out — the recovery the package doc describes.
func TestRedisLostHealRefusedAsStaleThenHealed(t *testing.T) {
	ctx := itest.Ctx(t, 20*time.Second)
	m := redisserver.New(t)
	r := redisserver.NewReplica(t, m)
	mc := newClient(t, m.Addr())
	lm := newLocker(t, mc, redislock.Options{})
	if err := r.Link.Cut(); err != nil {
		t.Fatal(err)
	}
	h := nowMicros(t, ctx, mc) + 1_000_000_000_000
	if _, err := lm.Heal(ctx, "k", h); err != nil {
		t.Fatal(err)
	}
	l1, err := lm.TryAcquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fence := &token.MemoryFence{Check: token.NoCheck()}
	if err := fence.Claim(ctx, "r", l1.Token()); err != nil {
		t.Fatal(err)
	}
	if err := r.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	rc := newClient(t, r.Replica.Addr())
	lr := newLocker(t, rc, redislock.Options{})
	l2, err := lr.TryAcquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	err = fence.Claim(ctx, "r", l2.Token())
	var se *token.StaleError
	if !errors.As(err, &se) {
		t.Fatalf("token %d after the lost heal (lost grant %d): claim %v, want a StaleError", l2.Token(), l1.Token(), err)
	}
	if _, err := lr.Heal(ctx, "k", se.Current); err != nil {
		t.Fatal(err)
	}
	_ = l2.Release(ctx)
	l3, err := lr.TryAcquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Claim(ctx, "r", l3.Token()); err != nil {
		t.Errorf("healed holder refused: %v", err)
	}
	if err := fence.Claim(ctx, "r", l1.Token()); err == nil {
		t.Errorf("stale holder admitted after the healed one")
	}
}
