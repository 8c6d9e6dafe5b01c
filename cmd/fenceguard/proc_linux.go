package main

import "syscall"

// deathSignal has CMD killed when run dies (Linux's parent-death signal).
func deathSignal(a *syscall.SysProcAttr) bool {
	a.Pdeathsig = syscall.SIGKILL
	return true
}
