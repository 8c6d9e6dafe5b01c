// Package review holds an adversarial review's attack tests of issue 15's
// claims, against the public API and real servers. Tests whose names start
// with TestBug demonstrate a defect and fail on the code they were written
// against; the others are claims that held.
package review

import (
	"testing"

	"github.com/fenceguard/fenceguard/internal/servers"
)

func TestMain(m *testing.M) { servers.Main(m) }
