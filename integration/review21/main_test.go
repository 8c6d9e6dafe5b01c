package review21

import (
	"context"
	"flag"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/internal/servers"
	"github.com/fenceguard/fenceguard/locks"
)

var defects = flag.Bool("review21.defects", false, "run the tests of review 21's findings that are not fixed yet")

// defect skips a test of a finding not fixed yet unless -review21.defects
// is given.
func defect(t *testing.T, finding string) {
	t.Helper()
	if !*defects {
		t.Skipf("review21 finding (run with -args -review21.defects): %s", finding)
	}
}

var _ = defect

func TestMain(m *testing.M) { servers.Main(m) }

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quietRedis{}) }

// slack is how long past its context's deadline a call may take to return.
const slack = 250 * time.Millisecond

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func pause(t *testing.T, s *servers.Server) {
	t.Helper()
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Resume() })
}

func resume(t *testing.T, s *servers.Server) {
	t.Helper()
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
}

func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newGuard(t *testing.T, l locks.Locker, ttl, every time.Duration) *guard.Guard {
	t.Helper()
	g, err := guard.New(l, guard.Options{TTL: ttl, RenewInterval: every, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func redisClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func etcdClient(t *testing.T, addr string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
