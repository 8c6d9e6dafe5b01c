//go:build unix && !linux

package demo

import (
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The signals that freeze and thaw a worker: every Unix has them.
const sigStop, sigCont = syscall.SIGSTOP, syscall.SIGCONT

// unsupported is empty where the demo runs.
const unsupported = ""

// stopped reports whether pid is stopped (state T), or gone, as ps(1)
// shows it (there is no /proc here). Without an answer from ps it gives
// the signal a moment: SIGSTOP takes effect at once in practice.
func stopped(pid int) bool {
	out, err := exec.Command("ps", "-o", "stat=", "-p", strconv.Itoa(pid)).Output()
	if err != nil || len(out) == 0 {
		time.Sleep(20 * time.Millisecond)
		return true
	}
	st := strings.TrimSpace(string(out))
	return st == "" || st[0] == 'T' || st[0] == 'Z'
}

// alive reports whether pid exists (a zombie included).
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }
