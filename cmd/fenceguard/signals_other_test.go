//go:build !linux

package main_test

import "testing"

// checkLostToAPause needs Linux: it finds the job's process group in /proc.
func checkLostToAPause(t *testing.T, _ lockSpec, _ string) {
	t.Log("a lease lost to a pause is checked on Linux only")
}
