package etcdlock_test

import (
	"context"
	"net/url"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceguard/fenceguard/harness/etcdserver"
)

// freezingClient is a real client whose first lease keep-alive, once etcd
// has answered it, does not return until thaw is closed: the waiter that
// sent it is frozen from then on — as a process SIGSTOPped right after its
// keep-alive went out is — while the cluster, and the client's own watch
// stream, carry on. Its lease runs out a TTL after that keep-alive.
type freezingClient struct {
	*clientv3.Client
	once   sync.Once
	frozen chan struct{} // closed when the keep-alive is answered and held
	thaw   chan struct{}
}

func (c *freezingClient) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	resp, err := c.Client.KeepAliveOnce(ctx, id)
	c.once.Do(func() {
		close(c.frozen)
		<-c.thaw
	})
	return resp, err
}

// A waiter frozen while the lock is handed to it, past its lease's TTL:
// its key is deleted by etcd, X acquires, and only then does the waiter
// resume, with the releases that emptied the queue ahead of it waiting in
// its watch, before — in a later response — the deletion of its own key.
// It must not return a grant while X holds the lock (and with a token below
// X's); it must queue again, behind X, and get the lock once X releases,
// with a larger token.
func TestFrozenWaiterDoesNotTakeStaleTurn(t *testing.T) {
	t.Parallel()
	d := etcdserver.Shared(t)
	c := newClient(t, d.Endpoints)
	ctx := ctxFor(t, time.Minute)
	const key = "k"
	q := d.Prefix + url.PathEscape(key) + "/"

	holder, err := newLocker(t, c, d.Prefix).Acquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fc := &freezingClient{Client: newClient(t, d.Endpoints), frozen: make(chan struct{}), thaw: make(chan struct{})}
	waiter := make(chan granted, 1)
	wl := newLocker(t, fc, d.Prefix)
	go func() {
		// The shortest lease etcd grants (2s): its first keep-alive, at a
		// third of it, is what freezes.
		lease, err := wl.Acquire(ctx, key, 2*time.Second)
		waiter <- granted{lease, err}
	}()
	select {
	case <-fc.frozen:
	case g := <-waiter:
		t.Fatalf("the waiter returned before it froze: %v", g.err)
	case <-ctx.Done():
		t.Fatal("the waiter never sent a keep-alive")
	}
	resp, err := c.Get(ctx, q, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil || len(resp.Kvs) != 2 {
		t.Fatalf("queue: %v, %v", resp, err)
	}
	waiterKey := string(resp.Kvs[1].Key)
	gone := c.Watch(ctx, waiterKey, clientv3.WithRev(resp.Header.Revision+1))

	// The lock is handed to the frozen waiter...
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// ... its lease expires, and etcd deletes its key ...
	for deleted := false; !deleted; {
		wr, ok := <-gone
		if !ok || wr.Err() != nil {
			t.Fatalf("watching the waiter's key: %v", wr.Err())
		}
		for _, ev := range wr.Events {
			deleted = deleted || ev.Type == mvccpb.DELETE
		}
	}
	// ... and X takes the lock.
	x, err := newLocker(t, c, d.Prefix).TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatalf("X: %v", err)
	}
	requeued := c.Watch(ctx, q, clientv3.WithPrefix(), clientv3.WithRev(int64(x.Token())+1))
	close(fc.thaw)

	select {
	case g := <-waiter:
		if g.err != nil {
			t.Fatalf("the resumed waiter failed instead of queueing again: %v", g.err)
		}
		owned := "gone"
		if r, err := c.Get(ctx, q, clientv3.WithPrefix(), clientv3.WithMinCreateRev(int64(g.lease.Token())), clientv3.WithMaxCreateRev(int64(g.lease.Token()))); err == nil && len(r.Kvs) > 0 {
			owned = "still there"
		}
		t.Fatalf("the resumed waiter was granted the lock (token %d, its key %s) while X holds it (token %d)", g.lease.Token(), owned, x.Token())
	case wr := <-requeued: // it queues again, behind X
		if wr.Err() != nil || len(wr.Events) == 0 || wr.Events[0].Type != mvccpb.PUT {
			t.Fatalf("watching the queue: %v %v", wr.Err(), wr.Events)
		}
	}
	if err := x.Release(ctx); err != nil {
		t.Fatal(err)
	}
	g := <-waiter
	if g.err != nil {
		t.Fatalf("the waiter, queued again: %v", g.err)
	}
	if g.lease.Token() <= x.Token() {
		t.Fatalf("the waiter was granted token %d after X's %d", g.lease.Token(), x.Token())
	}
	if err := g.lease.Renew(ctx); err != nil {
		t.Fatalf("the waiter's grant: %v", err)
	}
	if err := g.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
