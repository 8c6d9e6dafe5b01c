package main_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness"
)

// bin is the fenceguard program the tests run, built by TestMain from this
// package's source, with the race detector when the tests have it.
var bin string

func TestMain(m *testing.M) {
	harness.DefaultParallel(parallel)
	if err := build(); err != nil {
		fmt.Fprintln(os.Stderr, "fenceguard: building the program under test:", err)
		os.Exit(1)
	}
	harness.Main(m)
}

// parallel is how many tests run at once unless -test.parallel says
// otherwise. Most tests wait on the program under test, its lock's TTL or a
// job it runs, each with keys or servers of its own, rather than use the
// CPU: go test's default of GOMAXPROCS would leave a 2-core machine mostly
// idle.
const parallel = 3

func build() error {
	dir, err := harness.TempDir("cli-")
	if err != nil {
		return err
	}
	bin = filepath.Join(dir, "fenceguard")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(gobin, append(args, ".")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

// result is how a run of the program ended.
type result struct {
	code           int
	stdout, stderr string
}

// fenceguard runs the program with args and env (added to the test's
// environment) to its end, within a minute, and returns how it ended.
func fenceguard(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		t.Fatalf("fenceguard %s: %v", strings.Join(args, " "), err)
	}
	if ctx.Err() != nil {
		t.Fatalf("fenceguard %s: still running after a minute; stderr: %s", strings.Join(args, " "), r.stderr)
	}
	return r
}

// syncBuffer collects a program's output while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// running is a program started by startFenceguard: done is closed once Wait
// returned, with err its error.
type running struct {
	done chan struct{}
	err  error
}

var (
	runningMu sync.Mutex
	runs      = map[*exec.Cmd]*running{}
)

// startFenceguard starts the program with args and env (added to the test's
// environment) and returns without waiting for it; finish waits. The
// program's output is collected for finish. Should it still run when the test
// ends, it is continued (in case the test froze it) and killed.
func startFenceguard(t *testing.T, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = &syncBuffer{}, &syncBuffer{}
	if err := cmd.Start(); err != nil {
		t.Fatalf("fenceguard %s: %v", strings.Join(args, " "), err)
	}
	r := &running{done: make(chan struct{})}
	runningMu.Lock()
	runs[cmd] = r
	runningMu.Unlock()
	go func() {
		r.err = cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			if sigCont != nil {
				_ = cmd.Process.Signal(sigCont)
			}
			_ = cmd.Process.Kill()
			<-r.done
		}
		runningMu.Lock()
		delete(runs, cmd)
		runningMu.Unlock()
	})
	return cmd
}

// finish waits up to timeout for a program started by startFenceguard to end
// and returns how it ended; it fails the test when the program outlives
// timeout.
func finish(t *testing.T, cmd *exec.Cmd, timeout time.Duration) result {
	t.Helper()
	runningMu.Lock()
	r := runs[cmd]
	runningMu.Unlock()
	if r == nil {
		t.Fatalf("finish: %s was not started by startFenceguard", cmd)
	}
	select {
	case <-r.done:
	case <-time.After(timeout):
		t.Fatalf("fenceguard %s: still running after %v; stderr: %s",
			strings.Join(cmd.Args[1:], " "), timeout, cmd.Stderr.(*syncBuffer))
	}
	res := result{stdout: cmd.Stdout.(*syncBuffer).String(), stderr: cmd.Stderr.(*syncBuffer).String()}
	var exit *exec.ExitError
	switch {
	case r.err == nil:
	case errors.As(r.err, &exit):
		res.code = exit.ExitCode()
	default:
		t.Fatalf("fenceguard %s: %v", strings.Join(cmd.Args[1:], " "), r.err)
	}
	return res
}

// exited reports whether a program started by startFenceguard has ended.
func exited(cmd *exec.Cmd) bool {
	runningMu.Lock()
	r := runs[cmd]
	runningMu.Unlock()
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// jobDir is a directory a job run by the program writes its traces to; the
// job finds it in $JOB (env).
type jobDir string

func newJobDir(t *testing.T) jobDir { return jobDir(t.TempDir()) }

// env is the environment that tells a job where jobDir is.
func (d jobDir) env() []string { return []string{"JOB=" + string(d)} }

func (d jobDir) path(name string) string { return filepath.Join(string(d), name) }

// read returns what the job wrote to the file name so far ("" when nothing).
func (d jobDir) read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(d.path(name))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(b)
}

// lines returns the complete lines the job wrote to the file name so far.
func (d jobDir) lines(t *testing.T, name string) []string {
	t.Helper()
	s := d.read(t, name)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return strings.Split(s[:i], "\n")
	}
	return nil
}

// number waits up to timeout for the job to write a complete line holding a
// positive decimal number (a pid, a token) to the file name, and returns it.
func (d jobDir) number(t *testing.T, name string, timeout time.Duration) uint64 {
	t.Helper()
	var n uint64
	harness.Eventually(t, timeout, func() error {
		l := d.lines(t, name)
		if len(l) == 0 {
			return fmt.Errorf("the job wrote no line to %s", name)
		}
		v, err := strconv.ParseUint(l[0], 10, 64)
		if err != nil || v == 0 {
			return fmt.Errorf("the job wrote %q to %s, not a positive decimal number", l[0], name)
		}
		n = v
		return nil
	})
	return n
}

// touch creates the file name in the job's directory (a job waiting for it
// goes on).
func (d jobDir) touch(t *testing.T, name string) {
	t.Helper()
	if err := os.WriteFile(d.path(name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// ownLines returns the lines of stderr that the program writes as its own
// errors ("fenceguard: …"), leaving out log records.
func ownLines(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "fenceguard: ") {
			out = append(out, l)
		}
	}
	return out
}
