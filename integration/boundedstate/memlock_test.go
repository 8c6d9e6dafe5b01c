package boundedstate

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/locks/memlock"
)

// memlock deletes a key's entry when it is released with nobody waiting:
// the heap does not grow with the keys it has locked.
func TestMemlockKeepsNoEntryOfReleasedLocks(t *testing.T) {
	l := memlock.New()
	before := warmUp(t, l)
	lockKeys(t, l, "key", distinct)
	checkProcess(t, l, before)
}

// A lease that runs out without a release leaves its key's entry until the
// Locker notices; keys granted once and abandoned (a holder that
// panicked, a forgotten Release) go as other keys are used.
func TestMemlockForgetsExpiredUnreleasedLeases(t *testing.T) {
	l := memlock.New()
	before := warmUp(t, l)
	ctx := context.Background()
	for i := range distinct {
		if _, err := l.Acquire(ctx, fmt.Sprintf("abandoned-%d", i), time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(10 * time.Millisecond) // every lease has run out
	lockKeys(t, l, "key", distinct)   // the Locker in use on other keys
	checkProcess(t, l, before)
}
