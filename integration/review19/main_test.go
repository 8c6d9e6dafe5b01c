// Package review19 holds the nineteenth review's adversarial tests of
// redislock on Redis Cluster and Sentinel and of zklock on a ZooKeeper
// ensemble, written against the public API and the harness only.
//
// Tests named TestDefect* reproduce defects found by the review; they skip
// unless -review19.defects is given (they fail on the code they were written
// against). Tests named TestHeld* check claims that held, each with a
// control that shows what the defence prevents.
package review19

import (
	"flag"
	"testing"

	"github.com/fenceguard/fenceguard/internal/servers"
)

var defects = flag.Bool("review19.defects", false, "run the tests of the defects the review found (they fail until fixed)")

func TestMain(m *testing.M) { servers.Main(m) }

// defect skips t unless -review19.defects is set.
func defect(t *testing.T, finding string) {
	t.Helper()
	if !*defects {
		t.Skipf("review19 finding (run with -args -review19.defects): %s", finding)
	}
}
