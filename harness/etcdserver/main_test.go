package etcdserver

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceguard/fenceguard/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }

func etcdClient(t *testing.T, eps []string) *clientv3.Client {
	t.Helper()
	c, err := newClient(eps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// getValue returns key's value, "" when there is none.
func getValue(ctx context.Context, c *clientv3.Client, key string) (string, error) {
	resp, err := c.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 {
		return "", err
	}
	return string(resp.Kvs[0].Value), nil
}

func ctxFor(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

func eventually(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	harness.Eventually(t, d, func() error {
		if err := cond(); err != nil {
			return errors.New(what + ": " + err.Error())
		}
		return nil
	})
}
