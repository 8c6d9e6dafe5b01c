package servers

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/fenceguard/fenceguard/internal/ports"
)

// fakeTB records what unavailable decided instead of ending the test.
type fakeTB struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (f *fakeTB) Helper()                           {}
func (f *fakeTB) Skip(args ...any)                  { f.skipped, f.msg = true, args[0].(string) }
func (f *fakeTB) Fatalf(format string, args ...any) { f.failed, f.msg = true, format }

func TestUnavailableSkipsOrFails(t *testing.T) {
	msg := noServerMsg("Redis", EnvRedisAddrs, "redis-server")
	for _, c := range []struct {
		require  string
		wantFail bool
	}{
		{"", false},
		{"0", false},
		{"1", true},
	} {
		t.Setenv(EnvRequireServers, c.require)
		f := &fakeTB{TB: t}
		unavailable(f, msg)
		if f.failed != c.wantFail || f.skipped == c.wantFail {
			t.Errorf("%s=%q: failed %v skipped %v; want fail %v", EnvRequireServers, c.require, f.failed, f.skipped, c.wantFail)
		}
	}
	for _, want := range []string{EnvRedisAddrs, "redis-server", "go run ./integration/cmd/servers"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not mention %s", msg, want)
		}
	}
}

// The sweep removes the directories of dead test processes and keeps those
// of live ones.
func TestSweepStale(t *testing.T) {
	base := t.TempDir()
	dead := filepath.Join(base, dirPrefix+"1-dead")
	live := filepath.Join(base, dirPrefix+"2-live")
	foreign := filepath.Join(base, dirPrefix+"3-nolock")
	for _, d := range []string{dead, live, foreign} {
		if err := os.MkdirAll(filepath.Join(d, "redis-1", "data"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dead, lockName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(live, lockName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// flock locks are per open file description: a second open in this
	// process conflicts as another process's would.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}

	sweepStale(base)

	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("directory of a dead process kept (%v)", err)
	}
	for _, d := range []string{live, foreign} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s removed: %v", d, err)
		}
	}
}

func TestNamespacesAreUnique(t *testing.T) {
	a, b := namespace(t), namespace(t)
	if a == b || !strings.HasPrefix(a, runID+"-") || !strings.Contains(a, "TestNamespacesAreUnique") {
		t.Fatalf("namespaces %q, %q", a, b)
	}
}

func TestWithDatabase(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u@h:5/postgres?sslmode=disable": "postgres://u@h:5/fg_x?sslmode=disable",
		"postgresql://u@h:5":                        "postgresql://u@h:5/fg_x",
		"host=h port=5 dbname=postgres":             "host=h port=5 dbname=postgres dbname=fg_x",
	} {
		if got := withDatabase(in, "fg_x"); got != want {
			t.Errorf("withDatabase(%q) = %q, want %q", in, got, want)
		}
	}
}

// A port taken between choosing and binding it makes the harness start over
// on new ports, for every kind of server (each says "address in use" its own way).
func TestPortTakenRetries(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	for _, c := range []struct {
		name  string
		start func(testing.TB) *Server
	}{
		{"redis", NewRedis},
		{"etcd", NewEtcd},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			pickPorts = func(n int) ([]int, error) {
				calls++
				p, err := ports.Pick(n)
				if calls == 1 && err == nil {
					p[0] = taken
				}
				return p, err
			}
			defer func() { pickPorts = ports.Pick }()
			s := c.start(t)
			if calls < 2 || s.Addr() == l.Addr().String() {
				t.Fatalf("%s started on %s after %d port choices; want a retry on a new port", c.name, s.Addr(), calls)
			}
		})
	}
}
