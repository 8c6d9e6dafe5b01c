package zkserver

import (
	"github.com/go-zookeeper/zk"

	"testing"
	"time"
)

func TestZooKeeperEnsemble(t *testing.T) {
	t.Parallel()
	start := time.Now()
	e := NewEnsemble(t, 3)
	t.Logf("3-member ensemble up in %v", time.Since(start))
	ctx, cancel := ctxFor(2 * time.Minute) // the whole test, on a loaded machine
	defer cancel()
	leader, followers, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(followers) != 2 || len(e.Addrs()) != 3 {
		t.Fatalf("leader %s, followers %d, addrs %v", leader.Name(), len(followers), e.Addrs())
	}
	roles := e.Roles(ctx)
	if roles[leader] != "leader" || roles[followers[0]] != "follower" || roles[followers[1]] != "follower" {
		t.Fatalf("roles %s", e.describe(roles))
	}

	// A write through the leader's session reaches every member; a follower
	// serves it once it has applied it.
	lc := zkConn(t, []string{leader.Addr()})
	if _, err := lc.Create("/kept", []byte("v"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	fc := zkConn(t, []string{followers[0].Addr()})
	eventually(t, 10*time.Second, "follower serves the write", func() error {
		_, _, err := fc.Get("/kept")
		return err
	})

	// Without its leader the ensemble elects another, and the old leader
	// rejoins as a follower with its data.
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	next, rest, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if next == leader || len(rest) != 1 {
		t.Fatalf("after killing %s: leader %s, %d followers", leader.Name(), next.Name(), len(rest))
	}
	if err := leader.Start(false); err != nil {
		t.Fatal(err)
	}
	if _, followers, err = e.Leader(ctx); err != nil || len(followers) != 2 {
		t.Fatalf("after the restart: %d followers, %v", len(followers), err)
	}
	oc := zkConn(t, []string{leader.Addr()})
	if data, _, err := oc.Get("/kept"); err != nil || string(data) != "v" {
		t.Fatalf("rejoined member's /kept = %q, %v", data, err)
	}
}
