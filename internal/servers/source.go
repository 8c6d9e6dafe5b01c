package servers

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Environment variables read by this package. An endpoint variable makes the
// shared helper use that server instead of starting one.
const (
	// EnvPostgresDSN is a DSN of a PostgreSQL server whose user may CREATE
	// DATABASE, e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable.
	EnvPostgresDSN = "FENCEGUARD_PG_DSN"
	// EnvRedisAddrs is a comma-separated list of host:port of independent
	// Redis servers (RedisN(t, n) needs n of them).
	EnvRedisAddrs = "FENCEGUARD_REDIS_ADDRS"
	// EnvEtcdEndpoints is a comma-separated list of endpoints of one etcd cluster.
	EnvEtcdEndpoints = "FENCEGUARD_ETCD_ENDPOINTS"
	// EnvZooKeeperAddrs is a comma-separated list of host:port of one ZooKeeper ensemble.
	EnvZooKeeperAddrs = "FENCEGUARD_ZK_ADDRS"
	// EnvRequireServers set to 1 turns every "no server available" skip into
	// a failure. CI sets it, so a missing install cannot pass as green.
	EnvRequireServers = "FENCEGUARD_REQUIRE_SERVERS"
)

// source says where a shared server comes from.
type source int

const (
	srcNone  source = iota
	srcEnv          // an endpoint from the environment
	srcLocal        // a local binary the harness starts
)

// unavailable skips the test, or fails it when servers are required.
func unavailable(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv(EnvRequireServers) == "1" {
		t.Fatalf("%s (failing instead of skipping: %s=1)", msg, EnvRequireServers)
		return
	}
	t.Skip(msg)
}

func noServerMsg(what, env, debPkg string) string {
	return fmt.Sprintf("servers: no %s available: set %s, or install the Debian package %s "+
		"(on a machine with Docker, `go run ./integration/cmd/servers` starts containers and prints the variables to set)", what, env, debPkg)
}

func noBinaryMsg(helper, what, debPkg string) string {
	return fmt.Sprintf("servers: %s needs a local %s the harness can start and fault (install the Debian package %s); endpoints from the environment are only used by the shared helpers", helper, what, debPkg)
}

func envList(name string) []string {
	var out []string
	for _, f := range strings.Split(os.Getenv(name), ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// findBinary looks on PATH, then in the usual Debian locations.
func findBinary(name string, fallbacks ...string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, f := range fallbacks {
		if isExec(f) {
			return f
		}
	}
	return ""
}

func isExec(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// pgBinDir returns a directory holding both initdb and postgres: the one on
// PATH, else the newest /usr/lib/postgresql/<version>/bin.
func pgBinDir() string {
	if p, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(p)
		if isExec(filepath.Join(dir, "postgres")) {
			return dir
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d
		}
	}
	return ""
}

func pgVersion(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

// Namespaces. runID tells this test process apart from others that share an
// endpoint from the environment (go test runs packages in parallel).
var (
	seq   atomic.Int64
	runID = func() string {
		b := make([]byte, 3)
		rand.Read(b)
		return hex.EncodeToString(b)
	}()
)

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// label is a short, path- and key-safe form of the test's name.
func label(t testing.TB) string {
	s := unsafeChars.ReplaceAllString(t.Name(), "_")
	if len(s) > 40 {
		s = s[:40]
	}
	return s
}

// namespace returns "<run>-<n>-<test>", unique across tests and processes.
func namespace(t testing.TB) string {
	return runID + "-" + strconv.FormatInt(seq.Add(1), 10) + "-" + label(t)
}

// slot is a lazily started shared server: the first caller resolves it, all
// later callers of the package's tests get the same result, failure included.
type slot[T any] struct {
	mu   sync.Mutex
	done bool
	val  T
	skip string // no source at all: skip (or fail when required)
	err  error  // a source was there and failed: fail
}

func (s *slot[T]) get(t testing.TB, init func() (T, string, error)) T {
	t.Helper()
	requireMain(t)
	val, skip, err := s.load(init)
	if skip != "" {
		unavailable(t, skip)
	}
	if err != nil {
		t.Fatal(err)
	}
	return val
}

// load is get without a test: it starts the server on first use and
// returns it, or why there is none (skip), or why starting it failed.
func (s *slot[T]) load(init func() (T, string, error)) (T, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.done {
		s.val, s.skip, s.err = init()
		s.done = true
	}
	return s.val, s.skip, s.err
}

// dedicated registers a dedicated server's teardown with the test.
func dedicated(t testing.TB, s *Server) {
	t.Cleanup(func() {
		if err := s.destroy(); err != nil {
			t.Errorf("servers: tearing down %s: %v", s.name, err)
		}
	})
}
