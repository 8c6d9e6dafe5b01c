//go:build unix && !linux

package faults

import "syscall"

// The signals that freeze and thaw a client, and the call that sends them
// (the suite skips here: see procSupported).
const sigStop, sigCont = syscall.SIGSTOP, syscall.SIGCONT

func kill(pid int, sig syscall.Signal) error { return syscall.Kill(pid, sig) }
