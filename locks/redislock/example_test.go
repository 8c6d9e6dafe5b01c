package redislock_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/token"
)

// A worker guards a job with a Redis lock and fences its writes with a
// Redis-backed Fence: the holder's claim goes through, and a holder whose
// lease ran out while it was paused is refused once the next holder has
// claimed. It runs as written against the Redis at REDIS_ADDR (default
// 127.0.0.1:6379); this package's tests point REDIS_ADDR at their own.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: cmp.Or(os.Getenv("REDIS_ADDR"), "127.0.0.1:6379")})
	defer rdb.Close()

	locker, err := redislock.New(rdb, redislock.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	g, err := guard.New(locker, guard.Options{TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	fence := redislock.NewFence(rdb, redislock.FenceOptions{})

	var first token.Token
	err = g.Do(ctx, "job:nightly-report", func(ctx context.Context, t token.Token) error {
		first = t
		// Claim before acting: a holder that was paused past its lease is
		// refused here once the next holder has claimed.
		if err := fence.Claim(ctx, "report:2026-11-29", t); err != nil {
			return err
		}
		return nil // ... write the report, passing t along ...
	})
	fmt.Println("first run:", err)

	err = g.Do(ctx, "job:nightly-report", func(ctx context.Context, t token.Token) error {
		fmt.Println("next grant's token is higher:", t > first)
		return fence.Claim(ctx, "report:2026-11-29", t)
	})
	fmt.Println("second run:", err)

	// The first holder, had it been frozen all this time, wakes up and
	// writes with its old token:
	err = fence.Claim(ctx, "report:2026-11-29", first)
	var stale *token.StaleError
	fmt.Println("stale holder refused:", errors.As(err, &stale))
	// Output:
	// first run: <nil>
	// next grant's token is higher: true
	// second run: <nil>
	// stale holder refused: true
}

// A counter that fell behind its resource (a lost counter and a clock
// stepped back) shows as a StaleError for a holder that does hold the lock:
// move the counter past the resource's high-water. (Not run: it needs a
// Redis server whose counter was lost.)
func ExampleLocker_Heal() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	locker, err := redislock.New(rdb, redislock.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	fence := redislock.NewFence(rdb, redislock.FenceOptions{})

	lease, err := locker.Acquire(ctx, "job:nightly-report", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	var stale *token.StaleError
	if err := fence.Claim(ctx, "report:2026-11-29", lease.Token()); errors.As(err, &stale) {
		if _, err := locker.Heal(ctx, "job:nightly-report", stale.Current); err != nil {
			log.Fatal(err)
		}
		// The next grant's token is above stale.Current.
	}
}

// The resource side: a process that serves the guarded resource refuses
// tokens above the lock's current grant, asking Redis with a Sequencer (no
// Locker needed), and keeps its marks in a Fence whose claims one replica
// must acknowledge. (Not run: it needs a Redis server with a replica.)
func ExampleSequencer() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()

	seq := redislock.NewSequencer(rdb, "") // the lockers' prefix
	fence := redislock.NewFence(rdb, redislock.FenceOptions{
		// The clock bound first: made-up tokens far ahead cost no query.
		Check:          token.All(token.ClockBound{}, token.SequencerCheck(seq, token.SequencerOptions{})),
		Replicas:       1,
		ReplicaTimeout: 500 * time.Millisecond,
	})

	var t token.Token // from the request, e.g. httpmw's header
	switch err := fence.Claim(ctx, "job:nightly-report", t); {
	case errors.Is(err, token.ErrForged): // above the current holder's: 403
	case errors.Is(err, token.ErrStale): // an older holder: 409
	case errors.Is(err, redislock.ErrNotReplicated): // not durable: 503, retry
	case err != nil: // Redis unreachable or a replica: 503
	default: // claimed: act
	}
}
