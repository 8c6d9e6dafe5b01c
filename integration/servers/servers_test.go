package servers

import (
	"context"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) { Main(m) }

// The fault tests make clients fail on purpose; go-redis would log each one.
func init() { redis.SetLogger(quietRedisLogger{}) }

type quietRedisLogger struct{}

func (quietRedisLogger) Printf(context.Context, string, ...any) {}

// Clients used by the tests, closed at the end of the test.

func redisClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := newRedisClient(addr)
	t.Cleanup(func() { c.Close() })
	return c
}

func etcdClient(t *testing.T, eps []string) *clientv3.Client {
	t.Helper()
	c, err := newEtcdClient(eps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func pgConn(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := ctxFor(10 * time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func zkConn(t *testing.T, addrs []string) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect(addrs, 5*time.Second, zk.WithLogger(quietLogger{}), zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func pgConnect(ctx context.Context, dsn string) (*pgx.Conn, error) { return pgx.Connect(ctx, dsn) }

func ctxFor(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// eventually polls cond until it returns nil or the deadline passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %v: %v", what, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
