package etcdserver

import (
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestEtcdShared(t *testing.T) {
	t.Parallel()
	var got []*DB
	for _, name := range []string{"a", "b"} {
		t.Run(name, func(t *testing.T) {
			db := Shared(t)
			c := etcdClient(t, db.Endpoints)
			ctx, cancel := ctxFor(10 * time.Second)
			defer cancel()
			if _, err := c.Put(ctx, db.Prefix+"k", name); err != nil {
				t.Fatal(err)
			}
			resp, err := c.Get(ctx, db.Prefix, clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			kvs := resp.Kvs
			if len(kvs) != 1 || string(kvs[0].Value) != name {
				t.Fatalf("under %s: %v; want only k=%s", db.Prefix, kvs, name)
			}
			got = append(got, db)
		})
	}
	if len(got) != 2 {
		t.Fatal("subtests failed")
	}
	if got[0].Prefix == got[1].Prefix || !strings.HasPrefix(got[0].Prefix, "/fg/") {
		t.Fatalf("prefixes %q and %q: want distinct /fg/… prefixes", got[0].Prefix, got[1].Prefix)
	}
	c := etcdClient(t, got[0].Endpoints)
	ctx, cancel := ctxFor(10 * time.Second)
	defer cancel()
	for _, db := range got {
		resp, err := c.Get(ctx, db.Prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || resp.Count != 0 {
			n := int64(-1)
			if resp != nil {
				n = resp.Count
			}
			t.Fatalf("%d keys under %s after the test ended (%v)", n, db.Prefix, err)
		}
	}
}

func TestEtcdFaults(t *testing.T) {
	t.Parallel()
	s := New(t)
	c := etcdClient(t, []string{s.Addr()})
	get := func(d time.Duration) (string, error) {
		ctx, cancel := ctxFor(d)
		defer cancel()
		return getValue(ctx, c, "k")
	}
	ctx, cancel := ctxFor(10 * time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status(ctx, s.Addr()); err != nil {
		t.Fatal(err)
	}

	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if _, err := get(300 * time.Millisecond); err == nil {
		t.Fatal("Get answered while the server was paused")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "Get after Resume", func() error { _, err := get(time.Second); return err })

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := get(300 * time.Millisecond); err == nil {
		t.Fatal("Get answered after Kill")
	}
	if err := s.Start(false); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "Get after restart", func() error {
		v, err := get(time.Second)
		if err == nil && v != "v" {
			t.Fatalf("after Kill+Start(false) k = %q, want v", v)
		}
		return err
	})

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(true); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "Get after wipe", func() error {
		v, err := get(time.Second)
		if err == nil && v != "" {
			t.Fatalf("after Start(true) k = %q, want no key", v)
		}
		return err
	})
}

func TestEtcdClusterSurvivesLeaderKill(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := NewCluster(t, 3)
	t.Logf("3-member cluster up in %v", time.Since(start))
	ctx, cancel := ctxFor(30 * time.Second)
	defer cancel()
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cli := etcdClient(t, c.Endpoints())
	if _, err := cli.Put(ctx, "k", "1"); err != nil {
		t.Fatal(err)
	}

	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	// The two others elect a new leader and keep serving writes.
	eventually(t, 20*time.Second, "Put without the old leader", func() error {
		pctx, pcancel := ctxFor(2 * time.Second)
		defer pcancel()
		_, err := cli.Put(pctx, "k", "2")
		return err
	})
	lctx, lcancel := ctxFor(30 * time.Second)
	defer lcancel()
	next, err := c.Leader(lctx)
	if err != nil {
		t.Fatal(err)
	}
	if next == leader {
		t.Fatalf("leader is still %s after it was killed", leader.Name())
	}
	if err := leader.Start(true); err == nil {
		t.Fatal("a cluster member was wiped")
	}

	// The old leader rejoins with its data and catches up.
	if err := leader.Start(false); err != nil {
		t.Fatal(err)
	}
	one := etcdClient(t, []string{leader.Addr()})
	eventually(t, 20*time.Second, "rejoined member serves the new value", func() error {
		gctx, gcancel := ctxFor(2 * time.Second)
		defer gcancel()
		v, err := getValue(gctx, one, "k")
		if err != nil {
			return err
		}
		if v != "2" {
			return errors.New("not caught up yet")
		}
		return nil
	})
}
