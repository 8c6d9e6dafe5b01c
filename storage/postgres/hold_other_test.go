//go:build unix && !linux

package postgres_test

import "syscall"

// holderSysProcAttr puts a holder in a process group of its own. There is
// no parent-death signal here: should the test binary die first, a holder
// waiting on its stdin gets EOF, and a frozen one is ended by the SIGHUP
// and SIGCONT the kernel sends an orphaned process group with a stopped
// member.
func holderSysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// The signals that freeze and thaw a holder.
const sigStop, sigCont = syscall.SIGSTOP, syscall.SIGCONT
