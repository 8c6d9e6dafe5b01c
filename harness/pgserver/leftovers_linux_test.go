package pgserver

import (
	"bufio"
	"bytes"
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
const leftoverEnv = "FENCEGUARD_PG_LEFTOVER_CHILD"

// TestNoLeftovers runs a test binary that starts a shared and a dedicated
// PostgreSQL server and checks that once it is over nothing remains: no
// postmaster, no backend, no directory under /tmp, no System V shared
// memory. "normal" lets the child end on its own; "interrupt" sends it
// SIGINT in the middle of a test; "crash" SIGKILLs it, with the dedicated
// server frozen, so only the parent-death signal stops the postmasters and
// the next harness.Main sweeps the rest.
func TestNoLeftovers(t *testing.T) {
	if pgBinDir() == "" {
		harness.SkipOrFail(t, harness.NoBinaryMessage("pgserver.New", "PostgreSQL (initdb, postgres)", "postgresql"))
	}
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
		root   string
		pids   []int
		mains  []int
		shmids []int
		log    strings.Builder
		ready  bool
	)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(&log, line)
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "LEFTOVER" {
			continue
		}
		n := 0
		if len(f) > 2 {
			n, _ = strconv.Atoi(f[2])
		}
		switch f[1] {
		case "root":
			root = f[2]
		case "pid":
			pids = append(pids, n)
		case "main":
			mains = append(mains, n)
			pids = append(pids, n)
		case "shmid":
			shmids = append(shmids, n)
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
	if !ready || root == "" || len(mains) != 2 || len(pids) < 6 || len(shmids) != 2 {
		t.Fatalf("child reported root %q, %d postmasters, %d pids, %d shm segments, ready %v\n%s", root, len(mains), len(pids), len(shmids), ready, log.String())
	}
	gone := func(what string, pids []int) {
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
		gone("postmasters gone after the crash", mains)
		if _, err := os.Stat(root); os.IsNotExist(err) {
			// Another test process's harness swept it already (a second
			// copy of the suite running beside this one): what the sweep
			// is for.
			t.Logf("after the crash, %s was swept by another process already", root)
		} else if err != nil {
			t.Fatalf("after a crash the directory should still be there for the sweep: %v", err)
		}
		// The backends of the frozen server stay frozen until the next
		// harness.Main sweeps the directory: run one.
		sweep := exec.Command(os.Args[0], "-test.run=^$")
		sweep.Env = harness.ChildEnv(leftoverEnv + "=")
		if b, err := sweep.CombinedOutput(); err != nil {
			t.Fatalf("sweeping run: %v\n%s", err, b)
		}
	}
	gone("all server processes gone", pids)
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Fatalf("%s left behind (stat: %v)", root, err)
	}
	for _, id := range shmids {
		if _, _, ok := shmStat(id); ok {
			t.Errorf("PostgreSQL shared memory segment %d left behind", id)
		}
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
		fmt.Printf("LEFTOVER main %d\n", s.PID())
		for _, p := range descendants(s.PID()) {
			fmt.Printf("LEFTOVER pid %d\n", p)
		}
		_, id := pgShm(t, s)
		fmt.Printf("LEFTOVER shmid %d\n", id)
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

// descendants returns the processes below pid (PostgreSQL's backends).
func descendants(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may contain spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		children[pp] = append(children[pp], p)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}
