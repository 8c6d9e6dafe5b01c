package etcdserver_test

import (
	"context"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness/etcdserver"
)

// Kill the leader of a three-member etcd cluster; the others carry on.
func ExampleNewCluster() {
	_ = func(t *testing.T) {
		c := etcdserver.NewCluster(t, 3)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		leader, err := c.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// clientv3.New(clientv3.Config{Endpoints: c.Endpoints()}), then:
		leader.Kill()
		// Puts succeed again once the two others have elected a leader.
	}
}
