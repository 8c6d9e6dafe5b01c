package boundedstate

import (
	"testing"

	"github.com/fenceguard/fenceguard/integration/internal/itest"
)

func TestMain(m *testing.M) { itest.Main(m) }
