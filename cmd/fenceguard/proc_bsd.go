//go:build unix && !linux

package main

import "syscall"

// deathSignal does nothing: this system has no parent-death signal.
func deathSignal(*syscall.SysProcAttr) bool { return false }
