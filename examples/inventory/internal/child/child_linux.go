package child

import "syscall"

// watch: the kernel's parent-death signal ends the child, nothing to watch.
const watch = false

func sysProcAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: group, Pdeathsig: syscall.SIGKILL}
}
