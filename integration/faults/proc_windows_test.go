package faults

import (
	"errors"
	"syscall"
)

// Windows has no signals that freeze and thaw a process; the suite skips
// here (see procSupported), so none is sent.
const sigStop, sigCont = syscall.Signal(0x13), syscall.Signal(0x12)

func kill(int, syscall.Signal) error { return errors.ErrUnsupported }
