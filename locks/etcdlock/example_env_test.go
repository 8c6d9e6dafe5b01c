package etcdlock_test

import (
	"os"
	"strings"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/etcdserver"
)

// examplesFromEnv points ETCD_ENDPOINTS, which the Examples read as a
// user's program would, at the tests' own etcd. TestMain calls it after
// etcdserver.ExamplesNeed, so that it runs only once that server is up
// (the Examples are skipped when it is not). The etcd servers the tests
// start do not inherit it: they drop every ETCD_ variable.
func examplesFromEnv() {
	harness.ExamplesNeed("etcd at ETCD_ENDPOINTS", func() (string, error) {
		return "", os.Setenv("ETCD_ENDPOINTS", strings.Join(etcdserver.Example().Endpoints, ","))
	})
}
