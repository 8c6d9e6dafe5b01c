package harness

import (
	"errors"
	"os"
	"syscall"
)

// errWindows is what starting a server answers on Windows: the harness
// freezes servers with SIGSTOP, runs them in process groups and as other
// users, and finds its leftovers by file locks, all of which are Unix.
var errWindows = errors.New("harness: starting test servers needs a Unix system (Linux or macOS; on Windows, WSL 2)")

// Windows has no signals that freeze and thaw a process; no server runs
// here to receive them.
const sigStop, sigCont = syscall.Signal(0x13), syscall.Signal(0x12)

func kill(pid int, sig syscall.Signal) error { return errWindows }

// tryLock fails: rootDir, which every server start goes through, reports
// errWindows, and sweepStale removes nothing.
func tryLock(*os.File) error { return errWindows }

func sysProcAttr(from *syscall.SysProcAttr) *syscall.SysProcAttr { return from }

func procState(int) byte { return 0 }

const canSeeState = false

func alive(int) bool         { return false }
func tree(pid int) []int     { return []int{pid} }
func killUnder(string) []int { return nil }
