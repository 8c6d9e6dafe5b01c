package etcdlock_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
)

// revokeRecorder records the outcome of every Revoke sent through it.
type revokeRecorder struct {
	etcdlock.Client
	mu   sync.Mutex
	errs []error
}

func (r *revokeRecorder) Revoke(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseRevokeResponse, error) {
	resp, err := r.Client.Revoke(ctx, id)
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
	return resp, err
}

// Acquires whose join goes to a frozen member of a three-member cluster
// end at their deadline with the transaction in doubt; the client's other
// endpoint is the leader. Whenever the clean-up's revoke of the lease got
// through, the transaction, if the frozen member applies it once resumed,
// must leave no key: a put on a revoked lease fails. (A revoke that also
// met the frozen member leaves any such key to its TTL, as documented.)
func TestJoinInDoubtThroughFrozenMemberLeavesNoKey(t *testing.T) {
	t.Parallel()
	c := etcdserver.NewCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var frozen = c.Members[0]
	for _, m := range c.Members {
		if m != leader {
			frozen = m
			break
		}
	}
	plain, err := clientv3.New(clientv3.Config{Endpoints: []string{leader.Addr()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{frozen.Addr(), leader.Addr()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	rec := &revokeRecorder{Client: cli}
	l, err := etcdlock.New(rec, etcdlock.Options{Prefix: "/indoubt/"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	stop := time.Now().Add(14 * time.Second)
	tries, revoked, left := 0, 0, 0
	for time.Now().Before(stop) {
		tries++
		rec.mu.Lock()
		rec.errs = nil
		rec.mu.Unlock()
		if err := frozen.Pause(); err != nil {
			t.Fatal(err)
		}
		actx, acancel := context.WithTimeout(ctx, 300*time.Millisecond)
		g, err := l.Acquire(actx, "k", 8*time.Second)
		acancel()
		time.Sleep(1200 * time.Millisecond) // the clean-up's bound
		if err := frozen.Resume(); err != nil {
			t.Fatal(err)
		}
		if err == nil {
			_ = g.Release(ctx)
			continue
		}
		time.Sleep(700 * time.Millisecond) // for the frozen member to catch up
		resp, gerr := plain.Get(ctx, "/indoubt/", clientv3.WithPrefix())
		if gerr != nil {
			t.Fatal(gerr)
		}
		rec.mu.Lock()
		revs := append([]error(nil), rec.errs...)
		rec.mu.Unlock()
		ok := slices.ContainsFunc(revs, func(err error) bool { return err == nil })
		if ok {
			revoked++
		}
		for _, kv := range resp.Kvs {
			left++
			if ok {
				t.Errorf("try %d: acquire failed (%v), its lease revoked, yet it left %s", tries, err, kv.Key)
			} else {
				t.Logf("try %d: acquire failed (%v), its lease's revoke failed (%v), and it left %s to its TTL", tries, err, revs, kv.Key)
			}
			_, _ = plain.Revoke(ctx, clientv3.LeaseID(kv.Lease))
		}
	}
	t.Logf("%d tries, %d joins in doubt with their lease revoked, %d keys left", tries, revoked, left)
	if revoked == 0 {
		t.Error("no join was in doubt with its lease revoked: the case under test did not arise")
	}
}
