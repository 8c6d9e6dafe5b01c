package postgres_test

import "syscall"

// holderSysProcAttr has the kernel kill a holder should the test binary die
// first.
func holderSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
