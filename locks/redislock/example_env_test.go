package redislock_test

import (
	"os"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/redisserver"
)

// examplesFromEnv points REDIS_ADDR, which the Examples read as a user's
// program would, at the tests' own Redis. TestMain calls it after
// redisserver.ExamplesNeed, so that it runs only once that server is up
// (the Examples are skipped when it is not).
func examplesFromEnv() {
	harness.ExamplesNeed("Redis at REDIS_ADDR", func() (string, error) {
		return "", os.Setenv("REDIS_ADDR", redisserver.Example().Addr)
	})
}
