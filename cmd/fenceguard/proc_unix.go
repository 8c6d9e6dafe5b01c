//go:build unix

package main

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

const (
	sigHUP  = syscall.SIGHUP
	sigQUIT = syscall.SIGQUIT
	sigTERM = syscall.SIGTERM
	sigKILL = syscall.SIGKILL
	sigCONT = syscall.SIGCONT
	sigUSR1 = syscall.SIGUSR1
	sigUSR2 = syscall.SIGUSR2
)

// jobControl are the signals that stop and continue run and CMD together.
var jobControl = []os.Signal{syscall.SIGTSTP, syscall.SIGCONT}

// ownGroup makes CMD the leader of a process group of its own, so that a
// signal reaches everything it started, and, where the system can, has
// CMD killed should run die without a chance to stop it.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if deathSignal(cmd.SysProcAttr) {
		// The death signal goes with the thread that started CMD, not
		// the process: keep this goroutine, which runs until run exits,
		// on its thread, so the thread lives as long as run.
		runtime.LockOSThread()
	}
}

// signalGroup sends s to CMD's process group.
func signalGroup(cmd *exec.Cmd, s os.Signal) {
	if n, ok := s.(syscall.Signal); ok && cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, n)
	}
}

// endGroup ends what is left of CMD's group once CMD has exited: TERM (and
// CONT), then KILL if anything is left after grace.
func endGroup(cmd *exec.Cmd, grace time.Duration) {
	pgid := -cmd.Process.Pid
	if syscall.Kill(pgid, 0) != nil {
		return // nothing left (ESRCH)
	}
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	_ = syscall.Kill(pgid, syscall.SIGCONT)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		if syscall.Kill(pgid, 0) != nil {
			return
		}
	}
	_ = syscall.Kill(pgid, syscall.SIGKILL)
}

// jobControlSignal stops CMD's group and then run itself on SIGTSTP (the
// terminal's Ctrl-Z), and continues CMD's group on SIGCONT: CMD is never
// left running while run, stopped, cannot renew its lease.
func jobControlSignal(cmd *exec.Cmd, s os.Signal) {
	switch s {
	case syscall.SIGTSTP:
		signalGroup(cmd, syscall.SIGSTOP)
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	case syscall.SIGCONT:
		signalGroup(cmd, syscall.SIGCONT)
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
