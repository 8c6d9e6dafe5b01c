//go:build !unix

package main

import (
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Signals that do not exist here never arrive; they keep their names so
// that the code reads the same.
var (
	sigHUP  os.Signal = syscall.Signal(1)
	sigQUIT os.Signal = syscall.Signal(3)
	sigTERM os.Signal = syscall.Signal(15)
	sigKILL os.Signal = os.Kill
	sigCONT os.Signal = syscall.Signal(18)
	sigUSR1 os.Signal = syscall.Signal(10)
	sigUSR2 os.Signal = syscall.Signal(12)
)

// jobControl is empty: there is no job control here.
var jobControl []os.Signal

func jobControlSignal(*exec.Cmd, os.Signal) {}

// ownGroup does nothing: there are no process groups to signal here.
func ownGroup(*exec.Cmd) {}

// signalGroup ends CMD for any terminating signal: the only one a process
// can be sent here is a kill.
func signalGroup(cmd *exec.Cmd, s os.Signal) {
	if s == sigCONT {
		return
	}
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}

// endGroup does nothing: there is no group to end here.
func endGroup(*exec.Cmd, time.Duration) {}

func killedBy(*exec.ExitError) (int, bool) { return 0, false }

func signalNumber(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return 0
}
