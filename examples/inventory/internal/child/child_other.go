//go:build unix && !linux

package child

import "syscall"

// watch: no parent-death signal here; the child watches its parent pid.
const watch = true

func sysProcAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: group}
}
