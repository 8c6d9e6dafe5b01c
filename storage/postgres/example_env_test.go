package postgres_test

import (
	"os"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/pgserver"
)

// examplesFromEnv points DATABASE_URL, which the Examples read as a user's
// program would, at a fresh database of the tests' own PostgreSQL.
// TestMain calls it after pgserver.ExamplesNeed, so that it runs only once
// that server is up (the Examples are skipped when it is not).
func examplesFromEnv() {
	harness.ExamplesNeed("PostgreSQL at DATABASE_URL", func() (string, error) {
		return "", os.Setenv("DATABASE_URL", pgserver.Example().DSN)
	})
}
