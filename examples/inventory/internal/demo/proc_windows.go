package demo

import "syscall"

// unsupported says why the demo does not run here: it is checked before
// anything starts.
const unsupported = "the demo freezes a worker process with SIGSTOP, which Windows does not have: " +
	"run it on Linux or macOS (on Windows, inside WSL 2)"

// Windows has no signal that freezes a process; these are never sent.
const sigStop, sigCont = syscall.Signal(0x13), syscall.Signal(0x12)

func stopped(int) bool { return false }
func alive(int) bool   { return false }
