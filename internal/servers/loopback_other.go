//go:build !linux

package servers

import "testing"

// ShapeLoopback is Linux only: elsewhere the test is skipped, or fails
// when servers are required.
func ShapeLoopback(t testing.TB) {
	t.Helper()
	unavailable(t, "servers: shaping loopback traffic needs Linux, tc and root")
}
