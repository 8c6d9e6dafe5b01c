package etcdlockbench_test

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
)

func TestMain(m *testing.M) { harness.Main(m) }

func newClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newLocker(t testing.TB, c etcdlock.Client, prefix string) *etcdlock.Locker {
	t.Helper()
	l, err := etcdlock.New(c, etcdlock.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}
