//go:build unix && !linux

package harness

import "syscall"

// sysProcAttr puts a server in its own process group. Without Linux's parent-death signal, a crashed test binary can
// leave its servers running.
// It keeps the Credential of the kind's own attributes, from.
func sysProcAttr(from *syscall.SysProcAttr) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: credential(from)}
}

// procState is unknown outside Linux.
func procState(pid int) byte { return 0 }

const canSeeState = false

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// tree cannot see descendants here; signals also go to the process group.
func tree(pid int) []int { return []int{pid} }

// killUnder cannot find processes by working directory here.
func killUnder(dir string) []int { return nil }
