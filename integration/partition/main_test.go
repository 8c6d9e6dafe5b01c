package partition

import (
	"testing"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
)

func TestMain(m *testing.M) {
	harness.DefaultParallel(parallel)
	itest.Main(m)
}

// parallel is how many tests run at once unless -test.parallel says
// otherwise. The tests wait on elections, session timeouts and partitions,
// each on an ensemble of its own, rather than use the CPU: go test's default
// of GOMAXPROCS would leave a 2-core machine mostly idle. The partitions
// themselves still come one at a time (they shape the loopback device). Kept
// low: each ensemble is three JVMs to start.
const parallel = 3
