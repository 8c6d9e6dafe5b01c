package etcdlock_test

import (
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
)

// Leases pooled before etcd restarts, and a waiter queued across the
// restart, serve after it and after a compaction: the waiter is granted
// when the holder releases, and every grant's token is larger than the
// one before it, on the same key and across the keys of a set.
func TestPooledLeasesServeAcrossRestartAndCompaction(t *testing.T) {
	t.Parallel()
	srv := etcdserver.New(t)
	cli := newClient(t, []string{srv.Addr()})
	l, err := etcdlock.New(cli, etcdlock.Options{Prefix: "/r/", IdleLeases: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx := ctxFor(t, time.Minute)
	const ttl = 5 * time.Second
	set := []string{"a", "b", "c"}
	pooled, err := l.TryAcquireAll(ctx, set, ttl)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range pooled {
		if err := g.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	holder, err := l.Acquire(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		g   locks.Lease
		err error
	}
	waiter := make(chan result, 1)
	go func() {
		g, err := l.Acquire(ctx, "k", ttl)
		waiter <- result{g, err}
	}()
	awaitQueue(ctx, t, cli, "/r/", "k", 2)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(false); err != nil {
		t.Fatal(err)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-waiter
	if w.err != nil {
		t.Fatal(w.err)
	}
	if w.g.Token() <= holder.Token() {
		t.Fatalf("waiter's token %d after the holder's %d", w.g.Token(), holder.Token())
	}
	heldBy(t, ctx, cli, w.g)
	if err := w.g.Release(ctx); err != nil {
		t.Fatal(err)
	}
	rev, err := cli.Get(ctx, "/r/")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, rev.Header.Revision); err != nil {
		t.Fatal(err)
	}
	next, err := l.Acquire(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() <= w.g.Token() {
		t.Fatalf("token %d after %d", next.Token(), w.g.Token())
	}
	heldBy(t, ctx, cli, next)
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := l.TryAcquireAll(ctx, set, ttl)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range again {
		if g.Token() <= pooled[i].Token() {
			t.Fatalf("%s: token %d after %d", g.Key(), g.Token(), pooled[i].Token())
		}
		if err := g.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		if err := g.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
