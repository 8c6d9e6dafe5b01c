package servers_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceguard/fenceguard/integration/servers"
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
		conn, err := pgx.Connect(context.Background(), pg.DSN)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		// CREATE TABLE …: nobody else sees it; the database is dropped after the test.
	}
}

// A test uses only keys under its prefix on the shared Redis server.
func ExampleRedis() {
	_ = func(t *testing.T) {
		db := servers.Redis(t)
		rdb := redis.NewClient(&redis.Options{Addr: db.Addr})
		defer rdb.Close()
		rdb.Set(context.Background(), db.Prefix+"lock", "me", time.Second)
	}
}

// A dedicated server can be crashed and brought back on the same address.
func ExampleNewRedis() {
	_ = func(t *testing.T) {
		s := servers.NewRedis(t)
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
		defer rdb.Close()
		if err := s.Kill(); err != nil { // crash: calls fail now
			t.Fatal(err)
		}
		if err := s.Start(true); err != nil { // back, but empty: counters lost
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
		cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints()})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		leader.Kill()
		// cli.Put(ctx, …) succeeds once the two others have elected a leader.
	}
}

// Cut one client off a shared server without disturbing anyone else.
func ExampleNewProxy() {
	_ = func(t *testing.T) {
		db := servers.Redis(t)
		p := servers.NewProxy(t, db.Addr)
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
		defer rdb.Close()
		p.Cut()     // this client's calls fail
		p.Restore() // and work again
	}
}
