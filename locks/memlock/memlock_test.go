package memlock_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/lockstest"
	"github.com/fenceguard/fenceguard/locks/memlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	lockstest.Run(t, lockstest.Config{
		NewLocker: func(*testing.T) locks.Locker { return memlock.New() },
	})
}
