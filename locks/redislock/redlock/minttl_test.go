package redlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock/redlock"
)

func TestGuardRefusesTTLBelowMinimum(t *testing.T) {
	db := redisserver.Shared(t)
	l := newLocker(t, clients(t, []string{db.Addr}), redlock.Options{Prefix: db.Prefix})
	if l.MinTTL() != 10*time.Millisecond {
		t.Fatalf("MinTTL = %v, want 10ms", l.MinTTL())
	}
	_, err := guard.New(l, guard.Options{TTL: l.MinTTL() / 2})
	if !errors.Is(err, locks.ErrInvalidArgument) || !strings.Contains(err.Error(), "minimum "+l.MinTTL().String()) {
		t.Fatalf("guard.New with TTL %v = %v, want locks.ErrInvalidArgument naming the minimum %v", l.MinTTL()/2, err, l.MinTTL())
	}
}
