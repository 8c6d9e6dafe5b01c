package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The harness's own tests run a fake server: this test binary, started with
// fakeServerEnv set to a port, listens there, starts a child process (so
// that it has a process tree, as PostgreSQL does) and answers every
// connection with its pid.
const fakeServerEnv = "FENCEGUARD_HARNESS_FAKE_SERVER"

func TestMain(m *testing.M) {
	if port := os.Getenv(fakeServerEnv); port != "" {
		runFakeServer(port)
		return
	}
	Main(m)
}

func runFakeServer(port string) {
	l, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err) // "address already in use"
		os.Exit(1)
	}
	child := exec.Command("sleep", "3600")
	if err := child.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go func() {
		sig := make(chan os.Signal, 1)
		signalNotify(sig)
		<-sig
		child.Process.Kill()
		child.Wait()
		os.Exit(0)
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			os.Exit(1)
		}
		fmt.Fprintf(c, "%d\n", os.Getpid())
		c.Close()
	}
}

// fakeKind runs the fake server.
type fakeKind struct{}

func (fakeKind) Prepare(ctx context.Context, s *Server) error { return os.MkdirAll(s.DataDir(), 0o755) }

func (fakeKind) Command(s *Server) (*exec.Cmd, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(ChildEnv(fakeServerEnv+"="), fakeServerEnv+"="+strconv.Itoa(s.Port()))
	cmd.Dir = s.Dir()
	return cmd, nil
}

func (fakeKind) Ready(ctx context.Context, s *Server, pid int) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", s.Addr())
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if got := strings.TrimSpace(line); got != strconv.Itoa(pid) {
		return fmt.Errorf("%w: pid %s answers, we started %d", ErrPortTaken, got, pid)
	}
	return nil
}

func (fakeKind) StopSignal() syscall.Signal { return syscall.SIGTERM }
func (fakeKind) GracefulTeardown() bool     { return false }
func (fakeKind) CanWipe(*Server) error      { return nil }

func newFake(t *testing.T) *Server {
	t.Helper()
	RequireMain(t)
	s, err := Launch(fakeKind{}, "fake", 1)
	if err != nil {
		t.Fatal(err)
	}
	Cleanup(t, s)
	return s
}

// fakeTB records what SkipOrFail decided instead of ending the test.
type fakeTB struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (f *fakeTB) Helper()                           {}
func (f *fakeTB) Skip(args ...any)                  { f.skipped, f.msg = true, args[0].(string) }
func (f *fakeTB) Fatalf(format string, args ...any) { f.failed, f.msg = true, format }

func TestSkipOrFailFollowsRequireServers(t *testing.T) {
	msg := NoServerMessage("Redis", "FENCEGUARD_REDIS_ADDRS", "redis-server")
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
		SkipOrFail(f, msg)
		if f.failed != c.wantFail || f.skipped == c.wantFail {
			t.Errorf("%s=%q: failed %v skipped %v; want fail %v", EnvRequireServers, c.require, f.failed, f.skipped, c.wantFail)
		}
	}
	for _, want := range []string{"FENCEGUARD_REDIS_ADDRS", "redis-server", "go run ./integration/cmd/servers"} {
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
	if err := tryLock(f); err != nil {
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
	a, b := Namespace(t), Namespace(t)
	if a == b || !strings.HasPrefix(a, runID+"-") || !strings.Contains(a, "TestNamespacesAreUnique") {
		t.Fatalf("namespaces %q, %q", a, b)
	}
}

// A port taken between choosing and binding it makes the harness start over
// on new ports.
func TestPortTakenRetries(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	calls := 0
	pickPorts = func(n int) ([]int, error) {
		calls++
		p, err := FreePorts(n)
		if calls == 1 && err == nil {
			p[0] = taken
		}
		return p, err
	}
	defer func() { pickPorts = FreePorts }()
	s := newFake(t)
	if calls < 2 || s.Addr() == l.Addr().String() {
		t.Fatalf("started on %s after %d port choices; want a retry on a new port", s.Addr(), calls)
	}
}

// The fault methods act on the process and its children and report the
// state they leave it in; Start brings it back on the same address.
func TestServerFaults(t *testing.T) {
	s := newFake(t)
	addr := s.Addr()
	ctx := context.Background()
	ready := func() error {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return s.kind.Ready(rctx, s, s.PID())
	}
	if err := ready(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(false); !errors.Is(err, ErrRunning) {
		t.Fatalf("Start of a running server: %v, want ErrRunning", err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := ready(); err == nil {
		t.Fatal("a paused server answered")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := ready(); err != nil {
		t.Fatalf("after Resume: %v", err)
	}
	pids := tree(s.PID())
	if len(pids) < 2 {
		t.Fatalf("process tree %v; want the server and its child", pids)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, p := range pids {
		if alive(p) {
			t.Errorf("pid %d alive after Kill", p)
		}
	}
	if s.Running() || s.PID() != 0 {
		t.Fatal("Running after Kill")
	}
	if err := s.Kill(); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Kill of a killed server: %v, want ErrNotRunning", err)
	}
	if err := s.Start(true); err != nil {
		t.Fatal(err)
	}
	if s.Addr() != addr {
		t.Fatalf("restarted on %s, was %s", s.Addr(), addr)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(false); err != nil {
		t.Fatal(err)
	}
	if err := ready(); err != nil {
		t.Fatalf("after Stop and Start: %v", err)
	}
	if err := s.destroy(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(false); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after teardown: %v, want ErrClosed", err)
	}
	if _, err := os.Stat(s.Dir()); !os.IsNotExist(err) {
		t.Fatalf("directory kept after teardown: %v", err)
	}
}
