//go:build unix

package main

import (
	"os"
	"os/exec"
	"syscall"
)

const (
	sigHUP  = syscall.SIGHUP
	sigQUIT = syscall.SIGQUIT
	sigTERM = syscall.SIGTERM
	sigKILL = syscall.SIGKILL
	sigUSR1 = syscall.SIGUSR1
	sigUSR2 = syscall.SIGUSR2
)

// ownGroup makes CMD the leader of a process group of its own, so that a
// signal reaches everything it started.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup sends s to CMD's process group.
func signalGroup(cmd *exec.Cmd, s os.Signal) {
	if n, ok := s.(syscall.Signal); ok && cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, n)
	}
}

// killedBy returns the signal that ended a process.
func killedBy(exit *exec.ExitError) (int, bool) {
	if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return int(ws.Signal()), true
	}
	return 0, false
}

// signalNumber is s's number, as a shell counts it in 128+N.
func signalNumber(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return 0
}
