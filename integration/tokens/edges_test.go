package tokens

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

// TestRedisTokenEdges: redislock's tokens stay exact and strictly
// increasing over the edges, Issued and Current are exact, and the ceiling
// refuses instead of repeating. A healed key's tokens are the server clock
// plus the heal offset d (the healed value − the clock at the heal), so
// they cross each edge with the clock: exact means token − d is a reading
// of the server clock during the grants; and the ceiling refuses once the
// floor passes it (at once for the last edge, 2 µs below it).
func TestRedisTokenEdges(t *testing.T) {
	ctx := context.Background()
	db := redisserver.Shared(t)
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
	if _, err := l.Heal(ctx, "x", redislock.MaxToken); !errors.Is(err, token.ErrRange) || !errors.Is(err, locks.ErrInvalidArgument) {
		t.Errorf("Heal(MaxToken): %v", err)
	}
	t.Logf("%d grants over %d edges, all exact and increasing", grants, len(edges))
}

// TestRedlockTokenEdges: the same for redlock over 5 nodes.
func TestRedlockTokenEdges(t *testing.T) {
	ctx := context.Background()
	dbs := redisserver.SharedN(t, 5)
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
