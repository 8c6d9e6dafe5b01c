package child

import "syscall"

// watch: Windows does not re-parent a process whose parent ended, so its
// parent pid does not change; nothing here tells the child.
const watch = false

func sysProcAttr(bool) *syscall.SysProcAttr { return nil }
