package main

import (
	"errors"
	"fmt"
)

// Exit codes of fenceguard's own outcomes (see the package doc). The
// numbers follow sysexits.h where one fits; run passes CMD's own status
// through otherwise.
const (
	exitOK          = 0
	exitUsage       = 64  // EX_USAGE: bad flags, URL or arguments
	exitNotCurrent  = 65  // token --check: not the lock's current token
	exitUnavailable = 69  // EX_UNAVAILABLE: lock service or store unreachable
	exitSoftware    = 70  // EX_SOFTWARE: any other failure of fenceguard
	exitNotObtained = 75  // EX_TEMPFAIL: lock held by another within --wait
	exitLeaseLost   = 77  // the lease was lost while CMD ran
	exitCannotExec  = 126 // CMD found but not executable (as sh reports it)
	exitNotFound    = 127 // CMD not found (as sh reports it)
)

// exitError is an error with the exit code the program ends with.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// withCode gives err the exit code; nil stays nil.
func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

func usageErrorf(format string, args ...any) error {
	return withCode(exitUsage, fmt.Errorf(format, args...))
}

// exitCode is the code err ends the program with: its own, or
// exitSoftware.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	return exitSoftware
}

// silentExit ends the program with a code and no message: CMD's own status,
// which CMD has explained itself.
type silentExit int

func (s silentExit) Error() string { return fmt.Sprintf("exit status %d", int(s)) }
