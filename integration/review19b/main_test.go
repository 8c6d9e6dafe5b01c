package review19b

import (
	"flag"
	"testing"

	"github.com/fenceguard/fenceguard/internal/servers"
)

var defects = flag.Bool("review19b.defects", false, "run the tests of review 19b's findings that are not fixed yet")

// defect skips a test of a finding not fixed yet unless -review19b.defects
// is given.
func defect(t *testing.T, finding string) {
	t.Helper()
	if !*defects {
		t.Skipf("review19b finding (run with -args -review19b.defects): %s", finding)
	}
}

func TestMain(m *testing.M) { servers.Main(m) }
