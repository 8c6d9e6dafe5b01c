package servers

import (
	"context"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/internal/servers/internal/etcdgw"
	"github.com/fenceguard/fenceguard/internal/servers/internal/pgwire"
	"github.com/fenceguard/fenceguard/internal/servers/internal/resp"
	"github.com/fenceguard/fenceguard/internal/servers/internal/zkwire"
)

func TestMain(m *testing.M) { Main(m) }

// The tests talk to the servers through the harness's own clients, so the
// package's tests need nothing outside the standard library either. Each is
// closed at the end of the test.

func redisConn(t *testing.T, addr string) *resp.Conn {
	t.Helper()
	ctx, cancel := ctxFor(5 * time.Second)
	defer cancel()
	c, err := resp.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// redisDo runs one command on a fresh connection, within d.
func redisDo(addr string, d time.Duration, args ...string) (any, error) {
	ctx, cancel := ctxFor(d)
	defer cancel()
	c, err := resp.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Do(ctx, args...)
}

func pgConn(t *testing.T, dsn string) *pgwire.Conn {
	t.Helper()
	ctx, cancel := ctxFor(10 * time.Second)
	defer cancel()
	c, err := pgwire.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func pgConnect(ctx context.Context, dsn string) (*pgwire.Conn, error) {
	return pgwire.Connect(ctx, dsn)
}

func etcdClient(eps []string) *etcdgw.Client { return etcdgw.New(eps) }

func zkConn(t *testing.T, addrs []string) *zkwire.Conn {
	t.Helper()
	ctx, cancel := ctxFor(10 * time.Second)
	defer cancel()
	c, err := zkwire.Dial(ctx, addrs, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

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
