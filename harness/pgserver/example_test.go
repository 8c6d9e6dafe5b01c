package pgserver_test

import (
	"testing"

	"github.com/fenceguard/fenceguard/harness/pgserver"
)

// A test gets its own database on the package's shared PostgreSQL server.
func ExampleShared() {
	_ = func(t *testing.T) {
		pg := pgserver.Shared(t)
		_ = pg.DSN // pgx.Connect(ctx, pg.DSN): CREATE TABLE …, nobody else sees it
	}
}
