package locks_test

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fenceguard/fenceguard/locks"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCheckArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  string
		ttl  time.Duration
		ok   bool
	}{
		{"valid", "k", time.Second, true},
		{"at the minimum", "k", time.Millisecond, true},
		{"empty key", "", time.Second, false},
		{"below the minimum", "k", time.Millisecond - 1, false},
		{"zero ttl", "k", 0, false},
		{"negative ttl", "k", -time.Second, false},
	} {
		err := locks.CheckArgs(tc.key, tc.ttl, time.Millisecond)
		if tc.ok != (err == nil) || (!tc.ok && !errors.Is(err, locks.ErrInvalidArgument)) {
			t.Errorf("%s: CheckArgs = %v", tc.name, err)
		}
	}
}

func TestNotHeldError(t *testing.T) {
	err := locks.NotHeldError("renew", "sku:1", 42)
	if !errors.Is(err, locks.ErrNotHeld) {
		t.Fatalf("%v does not wrap ErrNotHeld", err)
	}
	if want := `renew "sku:1" (token 42): lock not held: the lease expired or was taken over`; err.Error() != want {
		t.Errorf("message %q, want %q", err.Error(), want)
	}
}
