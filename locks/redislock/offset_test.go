package redislock

import (
	"context"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness/redisserver"
)

// arithScript runs the scripts' decimal add and sub on pairs: ARGV holds
// a1, b1, a2, b2, …; it returns add(a, b) and, when b < a, sub(a, b)
// (else "") for each pair.
var arithScript = redis.NewScript(source("decimal") + `
local out = {}
for i = 1, #ARGV, 2 do
  local a, b = ARGV[i], ARGV[i + 1]
  out[#out + 1] = add(a, b)
  if lt(b, a) then out[#out + 1] = sub(a, b) else out[#out + 1] = '' end
end
return out
`)

// The offset's arithmetic on decimal strings is exact at the numeric
// edges a double gets wrong: around 2^53, up to 2^63−1 and past it (the
// sum of two tokens, up to 20 digits), with carries and borrows through
// every digit.
func TestDecimalAddSubExact(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	c := redis.NewClient(&redis.Options{Addr: db.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const (
		p53 = "9007199254740992"    // 2^53
		max = "9223372036854775807" // 2^63−1
		now = "1764620000123456"    // a clock in µs
	)
	pairs := [][2]string{
		{"1", "1"}, {"9", "1"}, {"1", "9"}, {"10", "1"}, {"1000", "999"}, {"999999999", "1"},
		{p53, "1"}, {"9007199254740991", "1"}, {"9007199254740993", "1"}, {"9007199254740993", "9007199254740991"},
		{"9007199254740993", "9007199254740992"}, {p53, p53}, {"4503599627370497", "4503599627370496"},
		{now, "1"}, {now, "60000000"}, {now, "9007199254740993"}, {"9007199254740995", now},
		{max, "1"}, {max, max}, {max, "9223372036854775806"}, {"9223372036854775806", now},
		{now, "9223372036854775806"}, {max, "9223372036854775808"}, {"18446744073709551615", "1"},
		{"1000000000000000000", "1"}, {"9999999999999999999", "1"}, {"10000000000000000000", "9999999999999999999"},
	}
	var argv []any
	for _, p := range pairs {
		argv = append(argv, p[0], p[1])
	}
	res, err := arithScript.Run(ctx, c, nil, argv...).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2*len(pairs) {
		t.Fatalf("got %d results for %d pairs", len(res), len(pairs))
	}
	for i, p := range pairs {
		a, _ := new(big.Int).SetString(p[0], 10)
		b, _ := new(big.Int).SetString(p[1], 10)
		if want := new(big.Int).Add(a, b).String(); res[2*i] != want {
			t.Errorf("add(%s, %s) = %s, want %s", p[0], p[1], res[2*i], want)
		}
		want := ""
		if b.Cmp(a) < 0 {
			want = new(big.Int).Sub(a, b).String()
		}
		if res[2*i+1] != want {
			t.Errorf("sub(%s, %s) = %q, want %q", p[0], p[1], res[2*i+1], want)
		}
	}
}

// mintAtScript runs mint with the clock given: ARGV now (decimal µs),
// idle ms. Returns {token or "", why or "", value or ""}.
var mintAtScript = redis.NewScript(source("decimal", "counter", "mint") + `
local tok, why, v = mint(ARGV[1], ARGV[2], redis.call('GET', KEYS[2]), false)
return {tok or '', why or '', v or ''}
`)

// mint with a chosen clock: max(counter + 1, now + d), exact at 2^53 and
// up to 2^63−1; a floor past the ceiling mints nothing (a range refusal)
// and leaves the counter as it was; a token from counter + 1 raises the
// offset so the next floor is above it; the offset is stored with the
// counter, "counter:offset" ("counter" alone: none); a value that is not
// that, with both numbers in 1..MaxToken, fails and is left as it was.
func TestMintOffsetEdges(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	c := redis.NewClient(&redis.Options{Addr: db.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const now = 1764620000123456
	u := func(n uint64) string { return strconv.FormatUint(n, 10) }
	cases := []struct {
		name            string
		counter, offset string // "" none
		now             uint64
		tok, why        string
		counterAfter    string
		offsetAfter     string
	}{
		{name: "plain", now: now, tok: u(now), counterAfter: u(now), offsetAfter: "0"},
		{name: "offset 0 (none)", counter: u(now - 5), offset: "0", now: now, tok: u(now), counterAfter: u(now), offsetAfter: "0"},
		{name: "counter above the clock, no offset (a clock stepped back)", counter: u(now + 60e6), now: now,
			tok: u(now + 60e6 + 1), counterAfter: u(now + 60e6 + 1), offsetAfter: u(60e6 + 1)},
		{name: "floor across 2^53", counter: u(1<<53 - 5), offset: u(1<<53 - now - 4), now: now + 5,
			tok: u(1<<53 + 1), counterAfter: u(1<<53 + 1), offsetAfter: u(1<<53 - now - 4)},
		{name: "floor just below 2^53", counter: u(1<<53 - 9), offset: u(1<<53 - now - 4), now: now + 1,
			tok: u(1<<53 - 3), counterAfter: u(1<<53 - 3), offsetAfter: u(1<<53 - now - 4)},
		{name: "counter past 2^53 above the floor", counter: u(1<<53 + 1), offset: u(1<<53 - now - 4), now: now + 2,
			tok: u(1<<53 + 2), counterAfter: u(1<<53 + 2), offsetAfter: u(1<<53 + 2 - now - 2)},
		{name: "floor exactly the ceiling", counter: u(1<<63 - 100), offset: u(1<<63 - 1 - now - 7), now: now + 7,
			tok: u(1<<63 - 1), counterAfter: u(1<<63 - 1), offsetAfter: u(1<<63 - 1 - now - 7)},
		{name: "floor one past the ceiling", counter: u(1<<63 - 100), offset: u(1<<63 - 1 - now - 7), now: now + 8,
			why: "range", counterAfter: u(1<<63 - 100), offsetAfter: u(1<<63 - 1 - now - 7)},
		{name: "floor far past the ceiling (offset MaxToken)", counter: u(5), offset: u(1<<63 - 1), now: now,
			why: "range", counterAfter: u(5), offsetAfter: u(1<<63 - 1)},
		{name: "counter at the ceiling", counter: u(1<<63 - 1), offset: u(1<<63 - 1 - now - 50), now: now,
			why: "range", counterAfter: u(1<<63 - 1), offsetAfter: u(1<<63 - 1 - now - 50)},
		{name: "counter at the ceiling, no offset", counter: u(1<<63 - 1), now: now,
			why: "range", counterAfter: u(1<<63 - 1), offsetAfter: "0"},
		{name: "counter one below the ceiling, no offset", counter: u(1<<63 - 2), now: now,
			tok: u(1<<63 - 1), counterAfter: u(1<<63 - 1), offsetAfter: u(1<<63 - 1 - now)},
		{name: "bad offset letters", counter: u(7), offset: "abc", now: now, why: "bad", counterAfter: u(7), offsetAfter: "abc"},
		{name: "bad offset negative", offset: "-1", now: now, why: "bad", offsetAfter: "-1"},
		{name: "bad offset leading zero", offset: "012", now: now, why: "bad", offsetAfter: "012"},
		{name: "bad offset past MaxToken", offset: "9223372036854775808", now: now, why: "bad", offsetAfter: "9223372036854775808"},
	}
	for i, tc := range cases {
		k := keysFor(db.Prefix, "mint"+strconv.Itoa(i))
		stored := tc.counter
		if tc.offset != "" && tc.offset != "0" {
			stored += ":" + tc.offset
		}
		if stored != "" {
			c.Set(ctx, k.all[1], stored, time.Minute)
		}
		res, err := mintAtScript.Run(ctx, c, k.all, u(tc.now), 90_000).StringSlice()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if res[0] != tc.tok || res[1] != tc.why {
			t.Errorf("%s: mint = %q (why %q, value %q), want %q (why %q)", tc.name, res[0], res[1], res[2], tc.tok, tc.why)
		}
		value := c.Get(ctx, k.all[1]).Val()
		if tc.why == "bad" {
			if value != stored {
				t.Errorf("%s: the counter's key holds %q after, want it as it was, %q", tc.name, value, stored)
			}
			continue
		}
		counter, offset, ok := strings.Cut(value, ":")
		if !ok && value != "" {
			offset = "0"
		}
		if counter != tc.counterAfter {
			t.Errorf("%s: counter %q after (%q), want %q", tc.name, counter, value, tc.counterAfter)
		}
		if offset != tc.offsetAfter {
			t.Errorf("%s: offset %q after (%q), want %q", tc.name, offset, value, tc.offsetAfter)
		}
		// The mint restarted the counter's idle expiry.
		if value != "" {
			if ttl := c.PTTL(ctx, k.all[1]).Val(); ttl < 60*time.Second {
				t.Errorf("%s: PTTL %v after the mint, want the counter's idle time (90s)", tc.name, ttl)
			}
		}
	}
}
