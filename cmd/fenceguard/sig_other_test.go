//go:build !unix

package main_test

import "os"

// sigCont is nil: nothing is frozen here.
var sigCont os.Signal
