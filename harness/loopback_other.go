//go:build !linux

package harness

import "testing"

// ShapeLoopback is Linux only: elsewhere the test is skipped, or fails
// when servers are required.
func ShapeLoopback(t testing.TB) {
	t.Helper()
	SkipOrFail(t, "harness: shaping loopback traffic needs Linux, tc and root")
}
