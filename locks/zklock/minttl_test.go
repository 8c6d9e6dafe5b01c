package zklock_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/zklock"
)

// zklock's minimum needs no server: guard.New checks it before any session.
func TestGuardRefusesTTLBelowMinimum(t *testing.T) {
	t.Parallel()
	l := newLocker(t, []string{"127.0.0.1:1"}, "/fenceguard/lock")
	_, err := guard.New(l, guard.Options{TTL: zklock.MinTTL / 2})
	if !errors.Is(err, locks.ErrInvalidArgument) || !strings.Contains(err.Error(), "minimum "+zklock.MinTTL.String()) {
		t.Fatalf("guard.New with TTL %v = %v, want locks.ErrInvalidArgument naming the minimum %v", zklock.MinTTL/2, err, zklock.MinTTL)
	}
}
