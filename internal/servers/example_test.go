package servers_test

import (
	"context"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/internal/servers"
)

// Every test package that uses the harness has this TestMain.
func ExampleMain() {
	testMain := func(m *testing.M) { servers.Main(m) } // func TestMain(m *testing.M)
	_ = testMain
}

// A test gets its own database on the package's shared PostgreSQL server.
func ExamplePostgres() {
	_ = func(t *testing.T) {
		pg := servers.Postgres(t)
		_ = pg.DSN // pgx.Connect(ctx, pg.DSN): CREATE TABLE …, nobody else sees it
	}
}

// A test uses only keys under its prefix on the shared Redis server.
func ExampleRedis() {
	_ = func(t *testing.T) {
		db := servers.Redis(t)
		_, _ = db.Addr, db.Prefix+"lock" // redis.NewClient(&redis.Options{Addr: db.Addr})
	}
}

// A dedicated server can be crashed and brought back on the same address.
func ExampleNewRedis() {
	_ = func(t *testing.T) {
		s := servers.NewRedis(t)
		// Point a client at s.Addr(), take a lock, then:
		if err := s.Kill(); err != nil { // crash: calls fail now
			t.Fatal(err)
		}
		if err := s.Start(true); err != nil { // back, but empty: counters lost
			t.Fatal(err)
		}
	}
}

// A replica lags its master as much as its link is delayed, and takes over
// when promoted.
func ExampleNewRedisReplica() {
	_ = func(t *testing.T) {
		master := servers.NewRedis(t)
		r := servers.NewRedisReplica(t, master)
		r.Link.Delay(200 * time.Millisecond) // reads on r.Replica.Addr() are 200 ms stale
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Promote(ctx); err != nil { // failover
			t.Fatal(err)
		}
	}
}

// Kill the leader of a three-member etcd cluster; the others carry on.
func ExampleNewEtcdCluster() {
	_ = func(t *testing.T) {
		c := servers.NewEtcdCluster(t, 3)
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

// Read through a follower of a three-member ZooKeeper ensemble, which may
// lag the leader.
func ExampleNewZooKeeperEnsemble() {
	_ = func(t *testing.T) {
		e := servers.NewZooKeeperEnsemble(t, 3)
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

// Cut one client off a shared server without disturbing anyone else.
func ExampleNewProxy() {
	_ = func(t *testing.T) {
		db := servers.Redis(t)
		p := servers.NewProxy(t, db.Addr)
		// Point one client at p.Addr(), the others at db.Addr, then:
		p.Cut()     // this client's calls fail
		p.Restore() // and work again
	}
}
