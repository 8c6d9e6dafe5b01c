package redlockbench_test

import (
	"testing"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/locks/redislock/redlock"
)

func TestMain(m *testing.M) { harness.Main(m) }

func newLocker(t testing.TB, cs []redlock.Client, o redlock.Options) *redlock.Locker {
	t.Helper()
	l, err := redlock.New(cs, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}
