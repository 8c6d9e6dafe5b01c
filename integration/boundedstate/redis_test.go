package boundedstate

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/locks/redislock/redlock"
)

// counterIdle is the shortest CounterIdle the lockers accept, so that the
// counters' idle window ends within the test.
const counterIdle = time.Second

func redisClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, PoolSize: 2 * workers})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// keysUnder lists the keys that start with prefix.
func keysUnder(ctx context.Context, c *redis.Client, prefix string) ([]string, error) {
	var keys []string
	it := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for it.Next(ctx) {
		keys = append(keys, it.Val())
	}
	return keys, it.Err()
}

// checkIdleCounters checks that every key under prefix on the nodes is a
// token counter (":tok") that expires within counterIdle, and that none is
// left once the window has passed.
func checkIdleCounters(t *testing.T, nodes []*redis.Client, prefix string) {
	t.Helper()
	ctx := itest.Ctx(t, time.Minute)
	counters := 0
	for _, c := range nodes {
		keys, err := keysUnder(ctx, c, prefix)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if !strings.HasSuffix(k, ":tok") {
				t.Errorf("%s: key %s left after every lock was released", c.Options().Addr, k)
				continue
			}
			ttl, err := c.PTTL(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if ttl == -2*time.Nanosecond { // expired since the scan
				continue
			}
			counters++
			if ttl < 0 || ttl > counterIdle {
				t.Errorf("%s: counter %s expires in %v, not within CounterIdle (%v)", c.Options().Addr, k, ttl, counterIdle)
			}
		}
	}
	t.Logf("%d counters live at the first look", counters)
	left := 0
	itest.Eventually(counterIdle+10*time.Second, func() bool {
		left = 0
		for _, c := range nodes {
			keys, err := keysUnder(ctx, c, prefix)
			if err != nil {
				t.Fatal(err)
			}
			left += len(keys)
		}
		return left == 0
	})
	if left != 0 {
		t.Errorf("%d keys under %s more than %v after the last grant", left, prefix, counterIdle+10*time.Second)
	}
}

// redislock keeps a key's lock while it is held, its queue while someone
// waits, and its token counter for CounterIdle after its last grant:
// nothing else, however many keys it has locked.
func TestRedislockKeepsNothingPastCounterIdle(t *testing.T) {
	db := redisserver.Shared(t)
	c := redisClient(t, db.Addr)
	prefix := db.Prefix + "lock:"
	l, err := redislock.New(c, redislock.Options{Prefix: prefix, CounterIdle: counterIdle})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	before := warmUp(t, l)
	lockKeys(t, l, "key", distinct)
	checkProcess(t, l, before)
	checkIdleCounters(t, []*redis.Client{c}, prefix)
}

// redlock keeps, on each node, a key's lock while it is held and its token
// counter for CounterIdle after its last grant: nothing else.
func TestRedlockKeepsNothingPastCounterIdle(t *testing.T) {
	dbs := redisserver.SharedN(t, 3)
	var nodes []*redis.Client
	var cs []redlock.Client
	for _, db := range dbs {
		c := redisClient(t, db.Addr)
		nodes = append(nodes, c)
		cs = append(cs, c)
	}
	prefix := dbs[0].Prefix + "lock:"
	// A node answers within the default NodeTimeout (a second, for this
	// TTL) only on a machine that is not overloaded; what is checked here
	// is the state, not the timing.
	l, err := redlock.New(cs, redlock.Options{Prefix: prefix, CounterIdle: counterIdle, NodeTimeout: ttl / 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	before := warmUp(t, l)
	lockKeys(t, l, "key", distinct)
	checkProcess(t, l, before)
	checkIdleCounters(t, nodes, prefix)
}
