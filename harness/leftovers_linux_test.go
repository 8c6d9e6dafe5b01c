package harness

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// leftoverEnv makes TestLeftoverChild run, in a child process of
// TestNoLeftovers; its value is "normal" or "crash".
const leftoverEnv = "FENCEGUARD_LEFTOVER_CHILD"

// TestNoLeftovers runs a test binary that starts servers (fake ones, each
// with a child process), and checks that once it is over nothing remains:
// no server process, children included, and no directory under /tmp. The
// backend packages check what is their own (PostgreSQL's shared memory,
// the JVM's perf-data file). "normal" lets the child end
// on its own (t.Cleanup and Main tear down); "interrupt" sends it SIGINT in
// the middle of a test (Main tears down and exits); "crash" SIGKILLs it, so
// only the parent-death signal stops the servers and the next Main sweeps the
// directory.
func TestNoLeftovers(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"normal", "interrupt", "crash"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testNoLeftovers(t, mode)
		})
	}
}

func testNoLeftovers(t *testing.T, mode string) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestLeftoverChild$", "-test.v", "-test.count=1", "-test.timeout=3m")
	cmd.Env = append(ChildEnv(leftoverEnv+"="), leftoverEnv+"="+mode)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		root  string
		pids  []int // every server process
		mains []int // the processes the harness started itself
		log   strings.Builder
		ready bool
	)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(&log, line)
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "LEFTOVER" {
			continue
		}
		switch f[1] {
		case "root":
			root = f[2]
		case "pid":
			p, _ := strconv.Atoi(f[2])
			pids = append(pids, p)
			if f[4] == "main" {
				mains = append(mains, p)
			}
		case "ready":
			ready = true
		}
		if ready && mode == "crash" {
			cmd.Process.Kill() // SIGKILL: no cleanup of any kind runs
			break
		}
		if ready && mode == "interrupt" {
			cmd.Process.Signal(os.Interrupt)
		}
	}
	err = cmd.Wait()
	switch mode {
	case "normal":
		if err != nil {
			t.Fatalf("child failed: %v\n%s", err, log.String())
		}
	case "interrupt":
		if cmd.ProcessState.ExitCode() != 130 {
			t.Fatalf("interrupted child exited with %v, want 130\n%s", err, log.String())
		}
	}
	if !ready || root == "" || len(pids) < 6 {
		t.Fatalf("child reported root %q, %d pids, ready %v; want a root, ≥6 pids\n%s", root, len(pids), ready, log.String())
	}

	gone := func(what string, pids []int) {
		t.Helper()
		Eventually(t, 20*time.Second, func() error {
			for _, p := range pids {
				if alive(p) {
					return fmt.Errorf("%s: pid %d (%s) still alive", what, p, comm(p))
				}
			}
			return nil
		})
	}
	if mode == "crash" {
		// The parent-death signal ends every process the harness started…
		gone("server processes gone after the crash", mains)
		if _, err := os.Stat(root); os.IsNotExist(err) {
			// Another test process's harness swept it already (a second
			// copy of the suite running beside this one): what the sweep
			// is for.
			t.Logf("after the crash, %s was swept by another process already", root)
		} else if err != nil {
			t.Fatalf("after a crash the directory should still be there for the sweep: %v", err)
		}
		// …but the children of a paused server stay frozen until the next
		// Main's sweep finds them.
		sweepStale(tmpBase)
	}
	gone("all server processes gone", pids)
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Fatalf("%s left behind (stat: %v)", root, err)
	}
}

func comm(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(b))
}

// TestLeftoverChild is the child process of TestNoLeftovers.
func TestLeftoverChild(t *testing.T) {
	mode := os.Getenv(leftoverEnv)
	if mode == "" {
		t.Skip("runs only as the child process of TestNoLeftovers")
	}
	// One torn down by Main, the others by their test's cleanup.
	if _, err := Launch(fakeKind{}, "fake", 1); err != nil {
		t.Fatal(err)
	}
	newFake(t)
	paused := newFake(t)
	if mode == "crash" {
		// Frozen servers must not survive a crash either.
		if err := paused.Pause(); err != nil {
			t.Fatal(err)
		}
	}

	registry.mu.Lock()
	fmt.Printf("LEFTOVER root %s\n", registry.root)
	for s := range registry.servers {
		for i, p := range tree(s.PID()) {
			role := "child"
			if i == 0 {
				role = "main"
			}
			fmt.Printf("LEFTOVER pid %d %s %s\n", p, s.Name(), role)
		}
	}
	registry.mu.Unlock()
	fmt.Println("LEFTOVER ready")
	if mode != "normal" {
		time.Sleep(2 * time.Minute) // the parent signals us long before
	}
}
