package sequencer

import (
	"github.com/redis/go-redis/v9"
	"testing"

	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks/redislock"
)

func TestMain(m *testing.M) { itest.Main(m) }

// rdb is a plain client on addr.
func rdb(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	return c
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
