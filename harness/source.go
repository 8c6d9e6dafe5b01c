package harness

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// EnvRequireServers set to 1 turns every "no server available" skip into a
// failure. CI sets it, so a missing install cannot pass as green.
const EnvRequireServers = "FENCEGUARD_REQUIRE_SERVERS"

// SkipOrFail skips t with msg, or fails it when FENCEGUARD_REQUIRE_SERVERS=1.
// Backends call it when no server is available.
func SkipOrFail(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv(EnvRequireServers) == "1" {
		t.Fatalf("%s (failing instead of skipping: %s=1)", msg, EnvRequireServers)
		return
	}
	t.Skip(msg)
}

// NoServerMessage is the skip message of a shared helper that found no
// server: it names the environment variable and the Debian package.
func NoServerMessage(what, env, debPkg string) string {
	return fmt.Sprintf("harness: no %s available: set %s, or install the Debian package %s "+
		"(on a machine with Docker, `go run ./integration/cmd/servers` starts containers and prints the variables to set)", what, env, debPkg)
}

// NoBinaryMessage is the skip message of a helper that starts a server for
// one test (to fault it) and found no local binary.
func NoBinaryMessage(helper, what, debPkg string) string {
	return fmt.Sprintf("harness: %s needs a local %s the harness can start and fault (install the Debian package %s); endpoints from the environment are only used by the shared helpers", helper, what, debPkg)
}

// EnvList returns the comma-separated, non-empty fields of the environment
// variable name.
func EnvList(name string) []string {
	var out []string
	for _, f := range strings.Split(os.Getenv(name), ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// FindBinary looks for name on PATH, then at the fallback paths (where
// Debian installs it); it returns "" when there is none.
func FindBinary(name string, fallbacks ...string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, f := range fallbacks {
		if st, err := os.Stat(f); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return f
		}
	}
	return ""
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

// UniqueID returns "<run>-<n>": unique across calls and across test
// processes sharing a server; letters, digits and "-" only.
func UniqueID() string {
	return runID + "-" + strconv.FormatInt(seq.Add(1), 10)
}

// Namespace returns "<run>-<n>-<test>", a name for the calling test's share
// of a shared server (a key prefix, a chroot): unique across tests and
// processes, and safe in keys and paths.
func Namespace(t testing.TB) string {
	return UniqueID() + "-" + label(t)
}

// Shared is a lazily started shared server of a package's tests: the first
// caller starts it, all later callers get the same result, failure
// included. The zero value is ready to use.
type Shared[T any] struct {
	mu   sync.Mutex
	done bool
	val  T
	skip string // no source at all: skip (or fail when required)
	err  error  // a source was there and failed: fail
}

// Get returns the server, calling init on first use. init returns the
// server, or a skip message when there is none (the test is skipped, see
// [SkipOrFail]), or an error when starting it failed (the test fails).
func (s *Shared[T]) Get(t testing.TB, init func() (T, string, error)) T {
	t.Helper()
	RequireMain(t)
	val, skip, err := s.Load(init)
	if skip != "" {
		SkipOrFail(t, skip)
	}
	if err != nil {
		t.Fatal(err)
	}
	return val
}

// Load is Get without a test: it returns the server, or why there is none
// (skip), or why starting it failed.
func (s *Shared[T]) Load(init func() (T, string, error)) (T, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.done {
		s.val, s.skip, s.err = init()
		s.done = true
	}
	return s.val, s.skip, s.err
}

// Cleanup tears s down (SIGKILL unless its Kind asks for a graceful stop)
// and removes its directory when t ends, failing t if that fails.
func Cleanup(t testing.TB, s *Server) {
	t.Cleanup(func() {
		if err := s.destroy(); err != nil {
			t.Errorf("harness: tearing down %s: %v", s.name, err)
		}
	})
}
