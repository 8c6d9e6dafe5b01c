package mysqlserver

import (
	"bufio"
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

// leftoverEnv makes TestLeftoverChild run, in a child process of
// TestNoLeftovers; its value is "normal", "interrupt" or "crash".
const leftoverEnv = "FENCEGUARD_MYSQL_LEFTOVER_CHILD"

// TestNoLeftovers runs a test binary that starts a shared and a dedicated
// MariaDB server and checks that once it is over nothing remains: no
// mariadbd, no directory under /tmp. "normal" lets the child end on its
// own; "interrupt" sends it SIGINT in the middle of a test; "crash"
// SIGKILLs it, with the dedicated server frozen, so only the parent-death
// signal stops the servers and the next harness.Main sweeps the rest.
func TestNoLeftovers(t *testing.T) {
	requireInstall(t)
	t.Parallel()
	for _, mode := range []string{"normal", "interrupt", "crash"} {
		t.Run(mode, func(t *testing.T) { // one at a time: each starts two servers
			testNoLeftovers(t, mode)
		})
	}
}

func testNoLeftovers(t *testing.T, mode string) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestLeftoverChild$", "-test.v", "-test.count=1", "-test.timeout=3m")
	cmd.Env = append(harness.ChildEnv(EnvDSN+"=", leftoverEnv+"="), leftoverEnv+"="+mode)
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
		pids  []int
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
			n, _ := strconv.Atoi(f[2])
			pids = append(pids, n)
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
	if !ready || root == "" || len(pids) != 2 {
		t.Fatalf("child reported root %q, %d servers, ready %v\n%s", root, len(pids), ready, log.String())
	}
	gone := func(what string) {
		t.Helper()
		harness.Eventually(t, 20*time.Second, func() error {
			for _, p := range pids {
				if alive(p) {
					return fmt.Errorf("%s: pid %d still alive", what, p)
				}
			}
			return nil
		})
	}
	if mode == "crash" {
		gone("servers gone after the crash")
		if _, err := os.Stat(root); os.IsNotExist(err) {
			// Another test process's harness swept it already: what the
			// sweep is for.
			t.Logf("after the crash, %s was swept by another process already", root)
		} else if err != nil {
			t.Fatalf("after a crash the directory should still be there for the sweep: %v", err)
		}
		sweep := exec.Command(os.Args[0], "-test.run=^$")
		sweep.Env = harness.ChildEnv(leftoverEnv + "=")
		if b, err := sweep.CombinedOutput(); err != nil {
			t.Fatalf("sweeping run: %v\n%s", err, b)
		}
	}
	gone("all servers gone")
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Fatalf("%s left behind (stat: %v)", root, err)
	}
}

// TestLeftoverChild is the child process of TestNoLeftovers.
func TestLeftoverChild(t *testing.T) {
	mode := os.Getenv(leftoverEnv)
	if mode == "" {
		t.Skip("runs only as the child process of TestNoLeftovers")
	}
	shared := Shared(t).Server
	dedicated := New(t)
	fmt.Printf("LEFTOVER root %s\n", filepath.Dir(dedicated.Dir()))
	for _, s := range []*harness.Server{shared, dedicated} {
		fmt.Printf("LEFTOVER pid %d\n", s.PID())
	}
	if mode == "crash" {
		// Frozen servers must not survive a crash either.
		if err := dedicated.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Println("LEFTOVER ready")
	if mode != "normal" {
		time.Sleep(2 * time.Minute) // the parent signals us long before
	}
}
