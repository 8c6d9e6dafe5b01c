//go:build unix && !linux

package harness

import "syscall"

// sysProcAttr puts a server in its own process group. Without Linux's parent-death signal, a crashed test binary can
// leave its servers running.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}

// procState is unknown outside Linux.
func procState(pid int) byte { return 0 }

const canSeeState = false

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// tree cannot see descendants here; signals also go to the process group.
func tree(pid int) []int { return []int{pid} }

// killUnder cannot find processes by working directory here.
func killUnder(dir string) []int { return nil }
