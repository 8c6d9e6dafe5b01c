package etcdlease

import (
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/integration/internal/itest"
)

func TestMain(m *testing.M) { itest.Main(m) }

func etcdClient(t *testing.T, addr string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
