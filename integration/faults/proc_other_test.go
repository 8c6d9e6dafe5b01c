//go:build !linux

package faults

import "syscall"

// procSupported says why the suite cannot run here: it freezes client
// processes and has the kernel kill them with the test process (Linux).
const procSupported = "the fault-injection suite needs Linux (SIGSTOP of client processes, parent-death signal, /proc)"

func sysProcAttr() *syscall.SysProcAttr { return nil }
func stopped(int) bool                  { return true }
func alive(int) bool                    { return false }
