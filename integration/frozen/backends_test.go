package frozen

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
	"github.com/fenceguard/fenceguard/locks/zklock"
)

// backend is a locker on a server of the test's own, to freeze.
type backend struct {
	name string
	ttl  time.Duration // a TTL the backend grants as asked
	// start returns a locker on a fresh server, and the server.
	start func(t *testing.T) (locks.Locker, *harness.Server)
}

var backends = []backend{
	{"redislock", 1500 * time.Millisecond, func(t *testing.T) (locks.Locker, *harness.Server) {
		srv := redisserver.New(t)
		return redisLocker(t, redisClient(t, srv.Addr()), "fg:lock:"), srv
	}},
	{"etcdlock", 2 * time.Second, func(t *testing.T) (locks.Locker, *harness.Server) {
		srv := etcdserver.New(t)
		l, err := etcdlock.New(etcdClient(t, srv.Addr()), etcdlock.Options{Prefix: "/fg/lock/"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l, srv
	}},
	{"zklock", 2 * time.Second, func(t *testing.T) (locks.Locker, *harness.Server) {
		srv := zkserver.New(t)
		l, err := zklock.New([]string{srv.Addr()}, zklock.Options{Prefix: "/fg/lock", Logger: itest.QuietZK{}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l, srv
	}},
}

func etcdClient(t *testing.T, addr string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func zkConn(t *testing.T, addr string) *zk.Conn {
	t.Helper()
	c, ev, err := zk.Connect([]string{addr}, 4*time.Second, zk.WithLogger(itest.QuietZK{}))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for c.State() != zk.StateHasSession {
		select {
		case <-ev:
		case <-deadline:
			t.Fatalf("no session on %s", addr)
		}
	}
	go func() {
		for range ev {
		}
	}()
	t.Cleanup(c.Close)
	return c
}
