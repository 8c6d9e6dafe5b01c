package zkserver_test

import (
	"context"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness/zkserver"
)

// Read through a follower of a three-member ZooKeeper ensemble, which may
// lag the leader.
func ExampleNewEnsemble() {
	_ = func(t *testing.T) {
		e := zkserver.NewEnsemble(t, 3)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		leader, followers, err := e.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// zk.Connect([]string{followers[0].Addr()}, …) reads what the
		// follower has applied; zk.Connect([]string{leader.Addr()}, …) writes.
		_, _ = leader, followers
	}
}
