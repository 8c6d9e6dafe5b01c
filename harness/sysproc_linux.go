package harness

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sysProcAttr puts a server in its own process group (out of reach of the
// terminal's Ctrl-C, which Main handles) and has the kernel SIGKILL it when
// the test binary dies, so a crash leaves no server behind. (The signal fires
// when the forking OS thread ends; Go only ends threads of goroutines that
// exit while locked to their thread, which this package never does.)
// It keeps the Credential of the kind's own attributes, from.
func sysProcAttr(from *syscall.SysProcAttr) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: credential(from)}
}

// procState returns the state letter of a process ('R', 'S', 'T', 'Z', …), or 0
// when it does not exist.
func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// pid (comm) state ppid pgrp …; comm may contain spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

const canSeeState = true

// alive reports whether pid exists and is not a zombie (zombies hold no
// port and no memory; whoever inherited them reaps them in its own time).
func alive(pid int) bool {
	st := procState(pid)
	return st != 0 && st != 'Z'
}

// tree returns pid and all its descendants. PostgreSQL's backends call
// setsid(), so the process group of the postmaster does not reach them.
func tree(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return []int{pid}
	}
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
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:])) // state ppid …
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		children[ppid] = append(children[ppid], p)
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// killUnder SIGKILLs every process whose working directory is dir or below:
// every server runs in its own directory (PostgreSQL's processes in their data
// directory), so this finds a server's processes even after they lost their
// parent, e.g. the backends of a paused PostgreSQL whose test binary crashed
// (frozen, they cannot act on their postmaster's death). It returns the pids
// once they are gone, or after 5 s.
func killUnder(dir string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var killed []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd")
		if err != nil || (cwd != dir && !strings.HasPrefix(cwd, dir+"/")) || !alive(pid) {
			continue
		}
		syscall.Kill(pid, syscall.SIGKILL)
		syscall.Kill(pid, syscall.SIGCONT)
		killed = append(killed, pid)
	}
	// Wait a little, so they detach from shared memory before it is removed.
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range killed {
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond) // polling the kernel's view; no event to wait on
		}
	}
	return killed
}
