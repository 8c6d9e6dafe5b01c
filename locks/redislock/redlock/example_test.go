package redlock_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/locks/redislock/redlock"
	"github.com/fenceguard/fenceguard/token"
)

// nodes are five independent Redis servers (not replicas of each other).
func nodes() []redlock.Client {
	var cs []redlock.Client
	for _, addr := range []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379", "10.0.0.4:6379", "10.0.0.5:6379"} {
		cs = append(cs, redis.NewClient(&redis.Options{Addr: addr}))
	}
	return cs
}

// A worker guards a job with a Redlock lock and sends its token with every
// write. (Not run: it needs five Redis servers.)
func Example() {
	ctx := context.Background()
	locker, err := redlock.New(nodes(), redlock.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	g, err := guard.New(locker, guard.Options{TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	err = g.Do(ctx, "sku:42", func(ctx context.Context, t token.Token) error {
		return nil // ... every access to sku:42 carries t ...
	})
	var stale *token.StaleError
	if errors.As(err, &stale) {
		// Counters fell behind the resource (lost, and clocks went back):
		// move them past its high-water.
		_ = locker.Heal(ctx, "sku:42", stale.Current)
	}
}

// The resource side asks the lock's nodes which token the current holder
// has, and refuses anything above it: a client that forges a token can at
// worst act as the current holder, never lock the next ones out. (Not run:
// it needs five Redis servers.)
func ExampleNewSequencer() {
	ctx := context.Background()
	// The same nodes and prefix as the lockers'; nothing to close.
	seq := redlock.NewSequencer(nodes(), "")
	check := token.All(token.ClockBound{}, token.SequencerCheck(seq, token.SequencerOptions{}))
	fence := &token.MemoryFence{Check: check}

	presented := token.Token(1 << 62) // from a request
	if err := fence.Claim(ctx, "sku:42", presented); errors.Is(err, token.ErrForged) {
		log.Printf("refused: %v", err) // 403
	}
}
