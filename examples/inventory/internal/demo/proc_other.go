//go:build unix && !linux

package demo

import (
	"syscall"
	"time"
)

// sysProcAttr puts a worker in its own process group, out of reach of the
// terminal's Ctrl-C: the demo stops its workers itself.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// stopped cannot ask the kernel here; SIGSTOP takes effect at once in
// practice, and the worker waits for the demo's ack anyway.
func stopped(int) bool { time.Sleep(20 * time.Millisecond); return true }

// alive is unknown here; the demo waits for its workers instead.
func alive(int) bool { return false }
