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
	"strings"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness"
)

// bin is the fenceguard program the tests run, built by TestMain from this
// package's source, with the race detector when the tests have it.
var bin string

func TestMain(m *testing.M) {
	if err := build(); err != nil {
		fmt.Fprintln(os.Stderr, "fenceguard: building the program under test:", err)
		os.Exit(1)
	}
	harness.Main(m)
}

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
