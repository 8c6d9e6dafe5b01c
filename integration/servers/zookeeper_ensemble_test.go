package servers

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// The ensemble serves with one leader and two followers; a connection made
// with ConnectZooKeeper stays on its member; the leader's loss elects
// another and the old leader rejoins as a follower.
func TestZooKeeperEnsemble(t *testing.T) {
	t.Parallel()
	e := NewZooKeeperEnsemble(t, 3)
	ctx, cancel := ctxFor(time.Minute)
	defer cancel()
	leader, followers, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(followers) != 2 {
		t.Fatalf("followers %v", followers)
	}
	lc := ConnectZooKeeper(t, leader.Addr(), 5*time.Second)
	fc := ConnectZooKeeper(t, followers[0].Addr(), 5*time.Second)
	if lc.Server() != leader.Addr() || fc.Server() != followers[0].Addr() {
		t.Fatalf("connected to %s and %s, want %s and %s", lc.Server(), fc.Server(), leader.Addr(), followers[0].Addr())
	}
	if _, err := lc.Create("/through-leader", []byte("v"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if _, err := fc.Sync("/through-leader"); err != nil {
		t.Fatal(err)
	}
	if data, _, err := fc.Get("/through-leader"); err != nil || string(data) != "v" {
		t.Fatalf("read through the follower after a sync: %q, %v", data, err)
	}

	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	next, rest, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if next == leader || len(rest) != 1 {
		t.Fatalf("after the leader's death: leader %s, followers %v", next.Name(), rest)
	}
	if err := leader.Start(false); err != nil {
		t.Fatal(err)
	}
	again, rest, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again != next || len(rest) != 2 {
		t.Fatalf("after the restart: leader %s, followers %v; want %s leading two", again.Name(), rest, next.Name())
	}
	oc := ConnectZooKeeper(t, leader.Addr(), 5*time.Second)
	if data, _, err := oc.Get("/through-leader"); err != nil || string(data) != "v" {
		t.Fatalf("read through the restarted member: %q, %v", data, err)
	}
}
