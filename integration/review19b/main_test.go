package review19b

import (
	"testing"

	"github.com/fenceguard/fenceguard/internal/servers"
)

func TestMain(m *testing.M) { servers.Main(m) }
