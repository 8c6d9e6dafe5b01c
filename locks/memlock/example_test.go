package memlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/token"
)

func Example() {
	ctx := context.Background()
	l := memlock.New()

	first, err := l.Acquire(ctx, "report:daily", 10*time.Second)
	if err != nil {
		panic(err)
	}
	// Someone else tries while it is held.
	if _, err := l.TryAcquire(ctx, "report:daily", 10*time.Second); errors.Is(err, locks.ErrNotObtained) {
		fmt.Println("second holder: not obtained")
	}
	if err := first.Release(ctx); err != nil {
		panic(err)
	}
	second, err := l.TryAcquire(ctx, "report:daily", 10*time.Second)
	if err != nil {
		panic(err)
	}
	defer second.Release(ctx)
	fmt.Println("second holder's token is larger:", second.Token() > first.Token())
	// Output:
	// second holder: not obtained
	// second holder's token is larger: true
}

// The Locker is its own sequencer: a resource that checks tokens against
// Current refuses any token above the current holder's, so a client that
// makes tokens up cannot lock the holder, or those queued behind it, out.
func ExampleLocker_Current() {
	ctx := context.Background()
	locker := memlock.New()
	fence := &token.MemoryFence{
		Check: token.All(token.ClockBound{}, token.SequencerCheck(locker, token.SequencerOptions{})),
	}
	holder, err := locker.Acquire(ctx, "sku:42", time.Minute)
	if err != nil {
		panic(err)
	}
	defer holder.Release(ctx)

	fmt.Println("holder:", fence.Claim(ctx, "sku:42", holder.Token()))
	err = fence.Claim(ctx, "sku:42", holder.Token()+1) // one above: not granted yet
	fmt.Println("forger refused:", errors.Is(err, token.ErrForged))
	fmt.Println("holder again:", fence.Claim(ctx, "sku:42", holder.Token()))
	// Output:
	// holder: <nil>
	// forger refused: true
	// holder again: <nil>
}
