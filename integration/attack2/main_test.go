// Package attack2 attacks storage/postgres's Prune floor, Table.Update with
// conditions, and the LockKey/token.Resolve rule against real PostgreSQL.
package attack2

import (
	"testing"

	"github.com/fenceguard/fenceguard/internal/servers"
)

func TestMain(m *testing.M) { servers.Main(m) }
