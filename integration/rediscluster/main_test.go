package rediscluster

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/token"
)

func TestMain(m *testing.M) { itest.Main(m) }

// nowMicros is the server clock of c, in µs.
func nowMicros(t *testing.T, ctx context.Context, c redis.Cmdable) token.Token {
	t.Helper()
	tm, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	return token.Token(tm.UnixMicro())
}

// newClient is a client on addr whose calls are bounded by their context.
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

// acquireRetry acquires key, retrying through the errors of a failover.
func acquireRetry(ctx context.Context, t *testing.T, l locks.Locker, key string, ttl time.Duration) locks.Lease {
	t.Helper()
	var last error
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		le, err := l.Acquire(actx, key, ttl)
		cancel()
		if err == nil {
			return le
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("acquire %q: %v", key, last)
	return nil
}
