//go:build unix

package main_test

import (
	"os"
	"syscall"
)

// sigCont continues a program a test froze.
var sigCont os.Signal = syscall.SIGCONT
