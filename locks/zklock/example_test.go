package zklock_test

import (
	"context"
	"log"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/locks/zklock"
	"github.com/fenceguard/fenceguard/token"
)

// A worker guards a job with a ZooKeeper lock and fences its writes with a
// ZooKeeper-backed Fence. (Not run: it needs a ZooKeeper server.)
func Example() {
	ctx := context.Background()
	servers := []string{"127.0.0.1:2181"}

	locker, err := zklock.New(servers, zklock.Options{Prefix: "/myapp/locks"})
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close() // ends the sessions, and with them every lease
	// The guard renews every TTL/3 and cancels the lease context as soon
	// as a renewal finds the session's connection lost.
	g, err := guard.New(locker, guard.Options{TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}

	conn, _, err := zk.Connect(servers, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	fence := zklock.NewFence(conn, zklock.FenceOptions{Prefix: "/myapp/fences"})

	err = g.Do(ctx, "job:nightly-report", func(ctx context.Context, t token.Token) error {
		// Claim before acting: a holder that was paused past its lease is
		// refused here once the next holder has claimed.
		if err := fence.Claim(ctx, "report:2026-11-29", t); err != nil {
			return err
		}
		return nil // ... write the report, passing t along ...
	})
	if err != nil {
		log.Print(err)
	}
}

// Issued bounds every token issued for a key so far: a token above it was
// never granted. It is no bound for a resource's check, which must also
// refuse tokens of queued waiters: that is [NewSequencer]'s. (Not run: it
// needs a ZooKeeper server.)
func ExampleLocker_Issued() {
	ctx := context.Background()
	locker, err := zklock.New([]string{"127.0.0.1:2181"}, zklock.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	presented := token.Token(1 << 40) // from a request header
	bound, err := locker.Issued(ctx, "sku:42")
	if err != nil {
		log.Fatal(err) // fail closed: refuse the request
	}
	if presented > bound {
		log.Printf("token %d was never issued for sku:42 (bound %d): forged", presented, bound)
	}
}

// A resource refuses every token above the current holder's, so a client
// that makes tokens up can at worst act as the holder, never lock out the
// queue behind it. (Not run: it needs a ZooKeeper server.)
func ExampleNewSequencer() {
	ctx := context.Background()
	conn, _, err := zk.Connect([]string{"127.0.0.1:2181"}, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	// The prefix of the lockers whose grants the resource accepts.
	seq := zklock.NewSequencer(conn, "/myapp/locks")
	fence := zklock.NewFence(conn, zklock.FenceOptions{
		Prefix: "/myapp/fences",
		Check:  token.SequencerCheck(seq, token.SequencerOptions{}),
	})

	presented := token.Token(1 << 40) // from a request header
	if err := fence.Claim(ctx, "sku:42", presented); err != nil {
		log.Print(err) // a ForgedError above the holder's token; a StaleError below the mark
	}
}
