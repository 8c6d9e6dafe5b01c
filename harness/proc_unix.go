//go:build unix

package harness

import (
	"os"
	"syscall"
)

// The signals that freeze and thaw a server.
const sigStop, sigCont = syscall.SIGSTOP, syscall.SIGCONT

// kill sends sig to pid (a negative pid: to its process group).
func kill(pid int, sig syscall.Signal) error { return syscall.Kill(pid, sig) }

// tryLock takes an exclusive lock on f without waiting.
func tryLock(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) }

// credential is the user a kind asked its server to run as, nil for ourselves.
func credential(attr *syscall.SysProcAttr) *syscall.Credential {
	if attr == nil {
		return nil
	}
	return attr.Credential
}
