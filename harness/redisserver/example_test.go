package redisserver_test

import (
	"context"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness/redisserver"
)

// A test uses only keys under its prefix on the shared Redis server.
func ExampleShared() {
	_ = func(t *testing.T) {
		db := redisserver.Shared(t)
		_, _ = db.Addr, db.Prefix+"lock" // redis.NewClient(&redis.Options{Addr: db.Addr})
	}
}

// A dedicated server can be crashed and brought back on the same address.
func ExampleNew() {
	_ = func(t *testing.T) {
		s := redisserver.New(t)
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
func ExampleNewReplica() {
	_ = func(t *testing.T) {
		master := redisserver.New(t)
		r := redisserver.NewReplica(t, master)
		r.Link.Delay(200 * time.Millisecond) // reads on r.Replica.Addr() are 200 ms stale
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Promote(ctx); err != nil { // failover
			t.Fatal(err)
		}
	}
}
