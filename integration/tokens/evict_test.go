package tokens

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks/redislock"
)

func evicted(t *testing.T, c *redis.Client) int64 {
	info, err := c.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "evicted_keys:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// TestRedisEvictionKeepsOffsetWithCounter: under maxmemory with a volatile-*
// eviction policy Redis evicts keys one at a time. With many healed locks and
// memory pressure from other (volatile) data, no lock keeps its healed
// counter without its heal offset: both live in the counter's key
// ("counter:offset"), so they are evicted together, and the next grant never
// comes from counter + 1 alone (the token a lossy failover would mint again,
// see TestRedisOffsetStrippedRepeatsTokenAcrossFailover).
func TestRedisEvictionKeepsOffsetWithCounter(t *testing.T) {
	ctx := itest.Ctx(t, 30*time.Second)
	s := redisserver.New(t)
	c := newClient(t, s.Addr())
	l := newLocker(t, c, redislock.Options{Prefix: "ev:"})
	const locksN = 300
	h := nowMicros(t, ctx, c) + 1_000_000_000_000
	for i := range locksN {
		if _, err := l.Heal(ctx, "k"+strconv.Itoa(i), h); err != nil {
			t.Fatal(err)
		}
	}
	used, err := c.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	var mem int64
	for _, line := range strings.Split(used, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			mem, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if err := c.ConfigSet(ctx, "maxmemory-policy", "volatile-random").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", strconv.FormatInt(mem+200_000, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	// Other data of the application, with TTLs, pushes past maxmemory.
	pad := strings.Repeat("x", 1000)
	for i := range 5000 {
		if err := c.Set(ctx, "cache:"+strconv.Itoa(i), pad, time.Hour).Err(); err != nil {
			break // OOM once nothing volatile is left to evict
		}
		if i%20 == 0 && evicted(t, c) >= 60 {
			break // a little pressure, as a cache at its limit has
		}
	}
	if err := c.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	alone, both, kept := 0, 0, 0
	var first string
	for i := range locksN {
		base := "ev:{k" + strconv.Itoa(i) + "}"
		// The counter's key holds "counter:offset"; an offset key of its
		// own (<base>:tokd) would count as an offset too.
		v, err := c.Get(ctx, base+":tok").Result()
		n1, n2 := 0, 0
		if err == nil {
			n1 = 1
			if strings.Contains(v, ":") {
				n2 = 1
			}
		}
		if n, _ := c.Exists(ctx, base+":tokd").Result(); n == 1 {
			n2 = 1
		}
		switch {
		case n1 == 1 && n2 == 0:
			alone++
			if first == "" {
				first = "k" + strconv.Itoa(i)
			}
		case n1 == 0 && n2 == 0:
			both++
		default:
			kept++
		}
	}
	t.Logf("%d locks: %d lost the offset alone, %d lost both, %d kept the offset", locksN, alone, both, kept)
	if first != "" {
		le, err := l.TryAcquire(ctx, first, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: next token %d = healed counter %d + %d (from counter + 1, not from the clock + offset)", first, le.Token(), h, le.Token()-h)
	}
	if alone > 0 {
		t.Errorf("%d healed locks kept their counter and lost their heal offset to eviction: their next grant is counter + 1, repeatable by a failover", alone)
	}
}
