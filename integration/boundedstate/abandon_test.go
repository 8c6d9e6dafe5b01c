package boundedstate

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/locks/zklock"
)

// abandoned is how many keys the abandoned-lease tests lock and never
// release, each lease running out after abandonTTL.
const (
	abandoned  = 500
	abandonTTL = time.Second
)

// abandonKeys acquires n keys named name+"-"+i with abandonTTL on workers
// goroutines and drops the leases, and returns when every one has run out.
func abandonKeys(t *testing.T, l locks.Locker, name string, n int) {
	t.Helper()
	ctx := itest.Ctx(t, 2*time.Minute)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				if _, err := l.Acquire(ctx, fmt.Sprintf("%s-%d", name, i), abandonTTL); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	time.Sleep(abandonTTL + 100*time.Millisecond) // after the last acquire: every lease has run out
}

// A redislock lock is a key with the lease's TTL: an abandoned lease's key
// expires with it, and only the counters stay, for CounterIdle.
func TestRedislockForgetsAbandonedLeases(t *testing.T) {
	db := redisserver.Shared(t)
	c := redisClient(t, db.Addr)
	prefix := db.Prefix + "lock:"
	l, err := redislock.New(c, redislock.Options{Prefix: prefix, CounterIdle: counterIdle})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	abandonKeys(t, l, "abandoned", abandoned)
	checkIdleCounters(t, []*redis.Client{c}, prefix)
}

// A zklock lease that runs out unreleased deletes its znode at its
// deadline, though the session lives on: the key znodes, containers, then
// go as after a release.
func TestZklockForgetsAbandonedLeases(t *testing.T) {
	srv := zkserver.NewWith(t, zkserver.Options{ContainerCheck: 200 * time.Millisecond, ContainerRate: 1_000_000})
	const prefix = "/lock"
	l, err := zklock.New([]string{srv.Addr()}, zklock.Options{Prefix: prefix, Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	base, err := znodeCount(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	abandonKeys(t, l, "abandoned", abandoned)
	var n int
	itest.Eventually(20*time.Second, func() bool {
		n, err = znodeCount(srv.Addr())
		return err == nil && n <= base+1 // the prefix znode
	})
	if err != nil {
		t.Fatal(err)
	}
	if n > base+1 {
		t.Errorf("server holds %d znodes 20s after %d abandoned leases ran out, %d before (and the prefix)", n, abandoned, base)
	}
}

// An etcdlock grant's key is attached to an etcd lease that nobody renews
// once the grant is abandoned: etcd deletes the key when it expires.
func TestEtcdlockForgetsAbandonedLeases(t *testing.T) {
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
	abandonKeys(t, l, "abandoned", abandoned)
	ctx := itest.Ctx(t, time.Minute)
	var live int64
	itest.Eventually(10*time.Second, func() bool {
		resp, err := c.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		live = resp.Count
		return live == 0
	})
	if live != 0 {
		t.Errorf("%d keys live under %s 10s after %d abandoned leases ran out", live, prefix, abandoned)
	}
}
