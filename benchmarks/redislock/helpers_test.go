package redislockbench_test

import (
	"testing"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/locks/redislock"
)

func TestMain(m *testing.M) { harness.Main(m) }

func newLocker(t testing.TB, c redislock.Client, o redislock.Options) *redislock.Locker {
	t.Helper()
	l, err := redislock.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}
