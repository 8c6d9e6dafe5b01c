package mysqlserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness"
)

// programChildEnv makes TestStartChild run, in a child process of
// TestStartLeavesNothing.
const programChildEnv = "FENCEGUARD_PROGRAM_CHILD"

// A program's throwaway server answers, and Close stops it and removes its
// directory.
func TestStart(t *testing.T) {
	requireInstall(t)
	t.Parallel()
	ctx, cancel := ctxFor(time.Minute)
	defer cancel()
	s, err := Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pid, dir := s.PID(), s.Dir()
	db, err := open(DSN(s))
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	one, err := queryValue(ctx, db, "SELECT 1")
	db.Close()
	if err != nil || one != "1" {
		s.Close()
		t.Fatalf("SELECT 1 = %s, %v", one, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	eventually(t, 10*time.Second, "mariadbd gone", func() error {
		if alive(pid) {
			return fmt.Errorf("pid %d alive", pid)
		}
		return nil
	})
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s left behind (stat: %v)", dir, err)
	}
	if err := s.Start(false); !errors.Is(err, harness.ErrClosed) {
		t.Fatalf("Start after Close: %v, want ErrClosed", err)
	}
}

// A cancelled context starts nothing.
func TestStartCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if s, err := Start(ctx); !errors.Is(err, context.Canceled) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Start(cancelled) = %v, want context.Canceled", err)
	}
}

// In a process that starts nothing else, Close also removes the process's
// directory under /tmp: nothing is left behind.
func TestStartLeavesNothing(t *testing.T) {
	requireInstall(t)
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestStartChild$", "-test.v", "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), programChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var root string
	var pid int
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "PROGRAM" {
			root = f[1]
			pid, _ = strconv.Atoi(f[3])
		}
	}
	if root == "" || pid == 0 {
		t.Fatalf("child did not report its server\n%s", out)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Fatalf("%s left behind (stat: %v)", root, err)
	}
	eventually(t, 10*time.Second, "mariadbd gone", func() error {
		if alive(pid) {
			return fmt.Errorf("pid %d alive", pid)
		}
		return nil
	})
}

// TestStartChild is the child process of TestStartLeavesNothing.
func TestStartChild(t *testing.T) {
	if os.Getenv(programChildEnv) == "" {
		t.Skip("runs only as the child process of TestStartLeavesNothing")
	}
	ctx, cancel := ctxFor(time.Minute)
	defer cancel()
	s, err := Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(s.Dir())
	fmt.Printf("PROGRAM %s %s %d\n", root, s.Name(), s.PID())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Fatalf("%s left behind (stat: %v)", root, err)
	}
}
