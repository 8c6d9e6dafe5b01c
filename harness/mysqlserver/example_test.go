package mysqlserver_test

import (
	"testing"

	"github.com/fenceguard/fenceguard/harness/mysqlserver"
)

// A test gets its own database on the package's shared MariaDB server.
func ExampleShared() {
	_ = func(t *testing.T) {
		db := mysqlserver.Shared(t)
		_ = db.DSN // sql.Open("mysql", db.DSN): CREATE TABLE …, nobody else sees it
	}
}
