package memlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/memlock"
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
