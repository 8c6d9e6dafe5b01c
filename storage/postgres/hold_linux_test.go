package postgres_test

import "syscall"

// holderSysProcAttr has the kernel kill a holder should the test binary die
// first.
func holderSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// The signals that freeze and thaw a holder.
const sigStop, sigCont = syscall.SIGSTOP, syscall.SIGCONT
