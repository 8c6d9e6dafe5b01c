package review

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/internal/servers"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/locks/redislock/redlock"
	"github.com/fenceguard/fenceguard/token"
)

func rdb(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// edges are heal targets around every place decimal-string arithmetic or a
// double could go wrong: 2^53, a carry into a new digit count just above the
// clock (16 → 17 digits) and further up, and the ceiling.
var edges = []token.Token{
	1<<53 - 3, 1<<53 - 1,
	9_999_999_999_999_997,   // 10^16 − 3: carries to 17 digits
	99_999_999_999_999_998,  // 10^17 − 2
	999_999_999_999_999_998, // 10^18 − 2: carries to 19 digits
	token.MaxInt64 - 2,      // the third grant would pass the ceiling
}

// Held (claim 2 of issue 15): redislock's tokens stay exact and strictly
// increasing over the edges, Issued and Current are exact, and the ceiling
// refuses instead of repeating. A healed key's tokens are the server clock
// plus the heal offset d (the healed value − the clock at the heal), so
// they cross each edge with the clock: exact means token − d is a reading
// of the server clock during the grants; and the ceiling refuses once the
// floor passes it (at once for the last edge, 2 µs below it).
func TestRedisTokenEdges(t *testing.T) {
	ctx := context.Background()
	db := servers.Redis(t)
	c := rdb(t, db.Addr)
	l, err := redislock.New(c, redislock.Options{Prefix: db.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	seq := redislock.NewSequencer(c, db.Prefix)
	fence := &token.MemoryFence{Check: token.NoCheck()}
	serverNow := func() token.Token {
		tm, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return token.Token(tm.UnixMicro())
	}
	grants := 0
	for i, h := range edges {
		key := fmt.Sprintf("edge%d", i)
		before := serverNow()
		if _, err := l.Heal(ctx, key, h); err != nil {
			t.Fatalf("Heal(%d): %v", h, err)
		}
		_, ds, _ := strings.Cut(c.Get(ctx, db.Prefix+"{"+key+"}:tok").Val(), ":") // "counter:offset"
		d, err := token.Parse(ds)
		if err != nil || h-d < before {
			t.Fatalf("Heal(%d): offset %d, %v; want the healed value − the clock at the heal", h, d, err)
		}
		prev := h
		for range 4 {
			le, err := l.Acquire(ctx, key, time.Second)
			if errors.Is(err, token.ErrRange) {
				if now := serverNow(); now+d <= token.MaxInt64 {
					t.Errorf("RangeError after %d, with the floor %d below the ceiling", prev, now+d)
				}
				break
			}
			if err != nil {
				t.Fatalf("acquire after %d: %v", prev, err)
			}
			grants++
			tok := le.Token()
			cur, err := seq.Current(ctx, key)
			iss, _ := l.Issued(ctx, key)
			after := serverNow()
			if tok <= prev || cur != tok || iss < tok || tok-d < before || tok-d > after {
				t.Errorf("after %d (offset %d): token %d, Current %d (%v), Issued %d; want token − offset a clock reading in [%d, %d]", prev, d, tok, cur, err, iss, before, after)
			}
			if err := fence.Claim(ctx, key, tok); err != nil {
				t.Errorf("fence refused fresh token %d: %v", tok, err)
			}
			prev = tok
			_ = le.Release(ctx)
		}
	}
	if _, err := l.Heal(ctx, "x", redislock.MaxHeal+1); !errors.Is(err, token.ErrRange) || !errors.Is(err, locks.ErrInvalid) {
		t.Errorf("Heal(MaxToken): %v", err)
	}
	t.Logf("%d grants over %d edges, all exact and increasing", grants, len(edges))
}

// Held: the same for redlock over 5 nodes.
func TestRedlockTokenEdges(t *testing.T) {
	ctx := context.Background()
	dbs := servers.RedisN(t, 5)
	var nodes []redlock.Client
	for _, d := range dbs {
		nodes = append(nodes, rdb(t, d.Addr))
	}
	prefix := dbs[0].Prefix
	l, err := redlock.New(nodes, redlock.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	seq := redlock.NewSequencer(nodes, prefix)
	grants := 0
	for i, h := range edges {
		key := fmt.Sprintf("edge%d", i)
		if err := l.Heal(ctx, key, h); err != nil {
			t.Fatalf("Heal(%d): %v", h, err)
		}
		prev := h
		for range 4 {
			le, err := l.Acquire(ctx, key, time.Second)
			if errors.Is(err, token.ErrRange) {
				// A key healed to h has tokens for (MaxInt64 − h) µs of
				// clock (the heal's offset grows the floor with it): the
				// edges within 10 s of the ceiling may run out.
				if prev < token.MaxInt64-10_000_000 {
					t.Errorf("RangeError at %d", prev)
				}
				break
			}
			if err != nil {
				t.Fatalf("acquire after %d: %v", prev, err)
			}
			grants++
			tok := le.Token()
			cur, _ := seq.Current(ctx, key)
			iss, _ := l.Issued(ctx, key)
			if tok <= prev || cur != tok || iss < tok {
				t.Errorf("after %d: token %d, Current %d, Issued %d", prev, tok, cur, iss)
			}
			prev = tok
			_ = le.Release(ctx)
		}
	}
	t.Logf("%d redlock grants over %d edges", grants, len(edges))
}

// Held (claim 3): with the sequencer check on redislock, a forger cannot
// raise a mark above the current holder's token; the queued waiter then
// gets through.
func TestRedisSequencerForger(t *testing.T) {
	ctx := context.Background()
	db := servers.Redis(t)
	c := rdb(t, db.Addr)
	l, _ := redislock.New(c, redislock.Options{Prefix: db.Prefix})
	defer l.Close()
	check := token.All(token.ClockBound{}, token.SequencerCheck(redislock.NewSequencer(c, db.Prefix), token.SequencerOptions{}))
	fence := redislock.NewFence(c, redislock.FenceOptions{Prefix: db.Prefix + "fence:", Check: check})
	h, err := l.Acquire(ctx, "sku:1", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Claim(ctx, "sku:1", h.Token()); err != nil {
		t.Fatal(err)
	}
	wch := make(chan locks.Lease, 1)
	go func() {
		w, err := l.Acquire(ctx, "sku:1", 5*time.Second)
		if err != nil {
			t.Error(err)
		}
		wch <- w
	}()
	time.Sleep(200 * time.Millisecond)
	iss, _ := l.Issued(ctx, "sku:1")
	refused := 0
	for _, f := range []token.Token{h.Token() + 1, iss, iss + 1, token.Token(time.Now().UnixMicro()), token.ClockBound{}.Bound()} {
		if err := fence.Claim(ctx, "sku:1", f); errors.Is(err, token.ErrForged) {
			refused++
		} else {
			t.Errorf("forged %d (holder %d): %v", f, h.Token(), err)
		}
	}
	_ = h.Release(ctx)
	w := <-wch
	if err := fence.Claim(ctx, "sku:1", w.Token()); err != nil {
		t.Errorf("waiter %d after the forger: %v", w.Token(), err)
	}
	_ = w.Release(ctx)
	t.Logf("forged tokens refused: %d of 5", refused)
}

// BUG (low–medium, operations). SequencerCheck caches the highest answer per
// lock and admits every token at or below it without asking, on the
// promise that answers never decrease. The documented way out of a counter
// healed high (redislock's package doc: delete the counter key, then reset
// the marks to the new holder's token, as Sequencer reports it) makes the
// answers decrease — and every resource process's cache still admits
// tokens up to the old, high answer, so a forger poisons the freshly reset
// mark again. (The redlock doc recommends the sequencer check alone exactly
// when counters were healed above the clock.)
func TestSequencerCacheAfterCounterRecovery(t *testing.T) {
	ctx := context.Background()
	db := servers.Redis(t)
	c := rdb(t, db.Addr)
	l, _ := redislock.New(c, redislock.Options{Prefix: db.Prefix})
	defer l.Close()
	check := token.SequencerCheck(redislock.NewSequencer(c, db.Prefix), token.SequencerOptions{})
	fence := redislock.NewFence(c, redislock.FenceOptions{Prefix: db.Prefix + "fence:", Check: check})
	const high = token.Token(1 << 60) // a poisoned mark healed into the counter
	if _, err := l.Heal(ctx, "sku:1", high); err != nil {
		t.Fatal(err)
	}
	le, err := l.Acquire(ctx, "sku:1", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Claim(ctx, "sku:1", le.Token()); err != nil { // caches high+1
		t.Fatal(err)
	}
	_ = le.Release(ctx)
	// The operator's recovery: delete the counter (and its heal offset, in
	// the same key), take the new grant's token, reset the mark to it.
	if err := c.Del(ctx, db.Prefix+"{sku:1}:tok").Err(); err != nil {
		t.Fatal(err)
	}
	le, err = l.Acquire(ctx, "sku:1", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer le.Release(ctx)
	if _, err := fence.Reset(ctx, "sku:1", le.Token()); err != nil {
		t.Fatal(err)
	}
	check.Forget("sku:1") // the documented last step: drop the cached answer
	cur, _ := redislock.NewSequencer(c, db.Prefix).Current(ctx, "sku:1")
	forged := le.Token() + 1_000_000_000
	err = fence.Claim(ctx, "sku:1", forged)
	honest := fence.Claim(ctx, "sku:1", le.Token())
	t.Logf("after recovery: holder %d, Sequencer.Current %d; forged %d → %v; holder then → %v", le.Token(), cur, forged, err, honest)
	if err == nil {
		t.Errorf("forged token %d above Sequencer.Current %d admitted from the check's cache; the honest holder is locked out again: %v", forged, cur, honest)
	}
}

// Held: a redislock Fence pointed at a replica accepts nothing.
func TestRedisFenceThroughReplica(t *testing.T) {
	ctx := context.Background()
	m := servers.NewRedis(t)
	rep := servers.NewRedisReplica(t, m)
	if err := rep.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	mc := rdb(t, m.Addr())
	rc := rdb(t, rep.Replica.Addr())
	mf := redislock.NewFence(mc, redislock.FenceOptions{Check: token.NoCheck()})
	rf := redislock.NewFence(rc, redislock.FenceOptions{Check: token.NoCheck()})
	if err := mf.Claim(ctx, "r", 10); err != nil {
		t.Fatal(err)
	}
	if err := rep.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	accepted := 0
	for _, tk := range []token.Token{10, 11, math.MaxUint64} {
		if err := rf.Claim(ctx, "r", tk); err == nil {
			accepted++
			t.Errorf("claim %d through the replica accepted", tk)
		}
	}
	if err := rf.Claim(ctx, "r", 9); !errors.Is(err, token.ErrStale) {
		t.Errorf("stale 9 through the replica: %v", err)
	}
}
