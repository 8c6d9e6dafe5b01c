// Package itest is what the integration test packages share: their
// TestMain, the switch that runs the tests of known defects, and helpers for
// contexts, frozen servers and deadlines measured on a busy machine.
//
// Every package's TestMain is
//
//	func TestMain(m *testing.M) { itest.Main(m) }
//
// A test of a defect not fixed yet starts with KnownDefect, which skips it
// unless the tests run with -fenceguard.defects:
//
//	go test ./integration/... -args -fenceguard.defects
package itest

import (
	"context"
	"flag"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness"
)

var defects = flag.Bool("fenceguard.defects", false, "also run the tests of known defects (they fail until the defect is fixed)")

// Main runs a test package: it stops every server the package started and
// fails it if goroutines leaked. go-redis's own log lines (reconnects to a
// frozen or killed server) are dropped.
func Main(m *testing.M) {
	redis.SetLogger(quietRedis{})
	harness.Main(m)
}

// KnownDefect marks t as the test of a defect not fixed yet, what saying in
// a line what is wrong: t is skipped unless -fenceguard.defects is given, so
// the defect stays documented and can be reproduced at will.
func KnownDefect(t testing.TB, what string) {
	t.Helper()
	if !*defects {
		t.Skipf("known defect (run with -args -fenceguard.defects): %s", what)
	}
}

// Ctx returns a context that ends after d or when t ends.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Pause freezes s (SIGSTOP) and thaws it when t ends, before the harness
// tears it down.
func Pause(t testing.TB, s *harness.Server) {
	t.Helper()
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Resume() })
}

// Resume thaws s.
func Resume(t testing.TB, s *harness.Server) {
	t.Helper()
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
}

// Eventually polls cond every 10 ms until it holds or within has passed,
// and reports whether it held.
func Eventually(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// QuietZK is a go-zookeeper logger that drops everything.
type QuietZK struct{}

// Printf drops its arguments.
func (QuietZK) Printf(string, ...any) {}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}
