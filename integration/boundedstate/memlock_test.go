package boundedstate

import (
	"testing"

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
