package redislock

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/token"
)

// The acquire script decides the common case inline — no offset, a
// counter plainly below the clock — and hands everything else to mint. Around that edge the tokens are what mint gives:
// max(counter + 1, now + d), exact at 2^53 and up to 2^63−1, with the
// offset raised when the token comes from the counter, stored with it;
// and a malformed counter or offset fails, granting nothing, with the
// stored value left as it was.
func TestAcquireFastPathEdges(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	c := redis.NewClient(&redis.Options{Addr: db.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := func() uint64 {
		tm, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return uint64(tm.UnixMicro())
	}
	u := func(n uint64) string { return strconv.FormatUint(n, 10) }
	n0 := now()
	const (
		fromClock = "clock" // the token is the server's clock: at least n0, at most the clock after
		refused   = "range" // code 3: at the ceiling
		bad       = "bad"   // an error reply
	)
	cases := []struct {
		name            string
		counter, offset string // "" none
		want            string // a token, or fromClock, refused, bad
		offsetAfter     string // "" unchanged from offset (or "0" when none)
	}{
		{name: "nothing stored", want: fromClock},
		{name: "offset only", offset: "0", want: fromClock},
		{name: "counter only (no offset yet)", counter: u(n0 - 1e6), want: fromClock},
		{name: "counter of the clock's length below it", counter: u(n0 - 1), offset: "0", want: fromClock},
		{name: "counter far below, shorter", counter: "5", offset: "0", want: fromClock},
		{name: "counter 15 digits", counter: "999999999999999", offset: "0", want: fromClock},
		{name: "counter above the clock, same length", counter: u(n0 + 60e6), offset: "0", want: u(n0 + 60e6 + 1), offsetAfter: "raised"},
		{name: "counter above the clock, no offset", counter: u(n0 + 60e6), want: u(n0 + 60e6 + 1), offsetAfter: "raised"},
		{name: "counter starting with 9, 16 digits", counter: "9000000000000000", offset: "0", want: "9000000000000001", offsetAfter: "raised"},
		{name: "counter 2^53 − 1", counter: u(1<<53 - 1), offset: "0", want: u(1 << 53), offsetAfter: "raised"},
		{name: "counter 2^53", counter: u(1 << 53), offset: "0", want: u(1<<53 + 1), offsetAfter: "raised"},
		{name: "counter 2^53 + 1", counter: u(1<<53 + 1), offset: "0", want: u(1<<53 + 2), offsetAfter: "raised"},
		{name: "counter 17 digits", counter: "12345678901234567", offset: "0", want: "12345678901234568", offsetAfter: "raised"},
		{name: "counter MaxToken − 1", counter: u(1<<63 - 2), offset: "0", want: u(1<<63 - 1), offsetAfter: "raised"},
		{name: "counter MaxToken", counter: u(1<<63 - 1), offset: "0", want: refused},
		{name: "counter past MaxToken", counter: "9223372036854775808", offset: "0", want: bad},
		{name: "counter with a leading zero, clock's length", counter: "0" + u(n0 - 1)[1:], offset: "0", want: bad},
		{name: "counter with a sign, clock's length", counter: "+" + u(n0 - 1)[1:], offset: "0", want: bad},
		{name: "counter with a space, clock's length", counter: " " + u(n0 - 1)[1:], offset: "0", want: bad},
		{name: "counter with a fraction, clock's length", counter: u(n0 - 1)[:14] + ".5", offset: "0", want: bad},
		{name: "counter in hex, clock's length", counter: "0x" + u(n0 - 1)[2:], offset: "0", want: bad},
		{name: "counter with an exponent, clock's length", counter: u(n0 - 1)[:13] + "e00", offset: "0", want: bad},
		{name: "offset 60 s", counter: u(n0 - 1), offset: "60000000", want: "offset"},
		{name: "offset with no counter", offset: "60000000", want: "offset"},
		{name: "bad offset", counter: u(n0 - 1), offset: "x", want: bad},
		{name: "offset with a leading zero", offset: "00", want: bad},
		{name: "offset 0 spelled out", counter: u(n0 - 1), offset: "0x", want: bad},
		{name: "two offsets", counter: u(n0 - 1), offset: "5:5", want: bad},
		{name: "empty offset", counter: u(n0-1) + ":", want: bad},
		{name: "offset, no counter", counter: ":5", want: bad},
	}
	for i, tc := range cases {
		k := keysFor(db.Prefix, "fast"+strconv.Itoa(i))
		// The counter's key holds "counter" or "counter:offset"; an offset
		// without a counter is stored with the counter 1 (far below).
		stored := tc.counter
		if tc.offset != "" && tc.offset != "0" {
			if stored == "" {
				stored = "1"
			}
			stored += ":" + tc.offset
		}
		if stored != "" {
			c.Set(ctx, k.all[1], stored, time.Minute)
		}
		before := now()
		res, err := acquireScript.Run(ctx, c, k.all, "id", 10_000, 90_000).Slice()
		after := now()
		value := c.Get(ctx, k.all[1]).Val()
		counter, offset, split := strings.Cut(value, ":")
		if !split && value != "" {
			offset = "0"
		}
		lock := c.Get(ctx, k.all[0]).Val()
		switch tc.want {
		case bad:
			if err == nil || !strings.Contains(err.Error(), "redislock:") {
				t.Errorf("%s: acquire = %v, %v; want an error reply", tc.name, res, err)
			}
			if value != stored || lock != "" {
				t.Errorf("%s: after the refusal the counter's key %q (was %q), lock %q; want them as they were", tc.name, value, stored, lock)
			}
			continue
		case refused:
			if err != nil || len(res) != 2 || res[0] != int64(3) {
				t.Errorf("%s: acquire = %v, %v; want a range refusal", tc.name, res, err)
			}
			if value != stored || lock != "" {
				t.Errorf("%s: after the refusal the counter's key %q (was %q), lock %q; want them as they were", tc.name, value, stored, lock)
			}
			continue
		}
		if err != nil || len(res) != 2 || res[0] != int64(1) {
			t.Errorf("%s: acquire = %v, %v; want a grant", tc.name, res, err)
			continue
		}
		got := res[1].(string)
		tok, perr := token.Parse(got)
		if perr != nil || tok.String() != got {
			t.Errorf("%s: token %q is not canonical: %v", tc.name, got, perr)
		}
		switch tc.want {
		case fromClock:
			if uint64(tok) < before || uint64(tok) > after {
				t.Errorf("%s: token %s, want the clock (%d..%d)", tc.name, got, before, after)
			}
		case "offset":
			d, _ := strconv.ParseUint(tc.offset, 10, 64)
			if uint64(tok) < before+d || uint64(tok) > after+d {
				t.Errorf("%s: token %s, want the clock + %d (%d..%d)", tc.name, got, d, before+d, after+d)
			}
		default:
			if got != tc.want {
				t.Errorf("%s: token %s, want %s", tc.name, got, tc.want)
			}
		}
		if counter != got || lock != "id|"+got {
			t.Errorf("%s: counter %q, lock %q after granting %s", tc.name, counter, lock, got)
		}
		switch tc.offsetAfter {
		case "raised": // d = token − now: the next floor is at the token
			d, err := strconv.ParseUint(offset, 10, 64)
			if err != nil || d+after < uint64(tok) || d+before > uint64(tok) {
				t.Errorf("%s: offset %q after granting %s, want about token − now", tc.name, offset, got)
			}
		default:
			want := tc.offset
			if want == "" {
				want = "0"
			}
			if offset != want {
				t.Errorf("%s: offset %q after, want %q", tc.name, offset, want)
			}
		}
		for _, key := range k.all[1:2] {
			if ttl := c.PTTL(ctx, key).Val(); ttl < 60*time.Second {
				t.Errorf("%s: %s PTTL %v after the grant, want the counter's idle time (90s)", tc.name, key, ttl)
			}
		}
	}
}

// The five names of a lock come from one string; each is what it says.
func TestKeysFor(t *testing.T) {
	t.Parallel()
	for _, tc := range [][2]string{{"p:", "k"}, {"", ""}, {"fenceguard:lock:", "a}b{c"}, {"x", "ünï"}} {
		k := keysFor(tc[0], tc[1])
		base := tc[0] + "{" + tc[1] + "}"
		want := []string{base, base + ":tok", base + ":q", base + ":qd"}
		if len(k.all) != len(want) {
			t.Fatalf("keysFor(%q, %q) = %q", tc[0], tc[1], k.all)
		}
		for i := range want {
			if k.all[i] != want[i] {
				t.Errorf("keysFor(%q, %q)[%d] = %q, want %q", tc[0], tc[1], i, k.all[i], want[i])
			}
		}
		if k.channel != base+":wake" {
			t.Errorf("keysFor(%q, %q).channel = %q", tc[0], tc[1], k.channel)
		}
		if b := k.bound(); len(b) != 2 || b[1] != base+":tok" {
			t.Errorf("bound = %q", b)
		}
	}
}
