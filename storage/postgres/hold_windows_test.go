package postgres_test

import "syscall"

// Windows cannot freeze a process: the frozen-holder tests need a Unix
// system, as the test servers do (the harness refuses to start them here).
func holderSysProcAttr() *syscall.SysProcAttr { return nil }

const sigStop, sigCont = syscall.Signal(0x13), syscall.Signal(0x12)
