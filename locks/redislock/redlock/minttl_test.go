package redlock_test

import (
	"errors"
	"testing"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/internal/servers"
	"github.com/fenceguard/fenceguard/locks/redislock/redlock"
)

func TestGuardRefusesTTLBelowMinimum(t *testing.T) {
	db := servers.Redis(t)
	l := newLocker(t, clients(t, []string{db.Addr}), redlock.Options{Prefix: db.Prefix})
	_, err := guard.New(l, guard.Options{TTL: redlock.MinTTL / 2})
	var te *guard.TTLError
	if !errors.As(err, &te) || te.Min != redlock.MinTTL {
		t.Fatalf("guard.New with TTL %v = %v, want a *guard.TTLError with Min %v", redlock.MinTTL/2, err, redlock.MinTTL)
	}
}
