package boundedstate

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
)

// etcdlock keeps a key under its prefix per grant held or waiting, deleted
// at the release: none is live once every lock is released. (etcd keeps
// the deleted keys' revisions in its index until a compaction; they are
// not live keys and are not counted here.)
func TestEtcdlockKeepsNoKeyOfReleasedLocks(t *testing.T) {
	db := etcdserver.Shared(t)
	c, err := clientv3.New(clientv3.Config{Endpoints: db.Endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	prefix := db.Prefix + "lock/"
	l, err := etcdlock.New(c, etcdlock.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	before := warmUp(t, l)
	lockKeys(t, l, "key", distinct)
	checkProcess(t, l, before)
	ctx := itest.Ctx(t, 10*time.Second)
	resp, err := c.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Errorf("%d keys live under %s after every lock was released", resp.Count, prefix)
	}
}
