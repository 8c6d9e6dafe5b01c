package faults

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// procSupported is empty where client processes can be frozen and checked.
const procSupported = ""

// sysProcAttr puts a client in its own process group, out of reach of the
// terminal's Ctrl-C (the suite stops its clients itself, frozen ones
// included), and has the kernel kill it should the test process die first.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// procState is pid's state letter in /proc (R, S, T, Z, …), 0 when it is
// gone.
func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')') // comm may hold spaces and parentheses
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// stopped reports whether pid is stopped (or gone).
func stopped(pid int) bool {
	switch procState(pid) {
	case 'T', 't', 'Z', 0:
		return true
	}
	return false
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	st := procState(pid)
	return st != 0 && st != 'Z'
}

// The signals that freeze and thaw a client, and the call that sends them.
const sigStop, sigCont = syscall.SIGSTOP, syscall.SIGCONT

func kill(pid int, sig syscall.Signal) error { return syscall.Kill(pid, sig) }
