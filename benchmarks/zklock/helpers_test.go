package zklockbench_test

import (
	"testing"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/locks/zklock"
)

func TestMain(m *testing.M) { harness.Main(m) }

type quiet struct{}

func (quiet) Printf(string, ...any) {}

func newLocker(t testing.TB, addrs []string, prefix string) *zklock.Locker {
	t.Helper()
	l, err := zklock.New(addrs, zklock.Options{Prefix: prefix, Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}
