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
