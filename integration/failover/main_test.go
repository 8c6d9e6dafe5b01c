package failover

import (
	"context"
	"github.com/redis/go-redis/v9"
	"testing"

	"github.com/fenceguard/fenceguard/integration/internal/itest"
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

func newLockerOpts(t *testing.T, c redislock.Client, o redislock.Options) *redislock.Locker {
	t.Helper()
	l, err := redislock.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}
