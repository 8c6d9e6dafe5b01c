package harness

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// ShapeLoopback prepares t to shape traffic on the loopback device with
// tc: it needs Linux, root and tc (Debian: iproute2) — without them the
// test is skipped, or fails when servers are required — and it takes a
// lock shared by every process of the harness (a flock on a file in the
// temporary directory), held until t ends, so that tests in packages
// running at once do not install root qdiscs on lo over each other. At
// cleanup it deletes lo's root qdisc, then releases the lock. The caller
// installs its qdisc after ShapeLoopback returns.
func ShapeLoopback(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("tc"); err != nil || os.Geteuid() != 0 {
		SkipOrFail(t, "harness: shaping loopback traffic needs tc (Debian: iproute2) and root")
		return
	}
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "fenceguard-loopback-tc.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("harness: loopback lock: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("harness: loopback lock: %v", err)
	}
	// A qdisc a crashed test left behind would refuse ours.
	_ = exec.Command("tc", "qdisc", "del", "dev", "lo", "root").Run()
	t.Cleanup(func() {
		_ = exec.Command("tc", "qdisc", "del", "dev", "lo", "root").Run()
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	})
}
