package demo

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// The signals that freeze and thaw a worker.
const sigStop, sigCont = syscall.SIGSTOP, syscall.SIGCONT

// unsupported is empty where the demo runs.
const unsupported = ""

// stopped reports whether pid is stopped (state T), or gone.
func stopped(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')') // comm may hold spaces and parentheses
	if i < 0 || i+2 >= len(b) {
		return true
	}
	st := b[i+2]
	return st == 'T' || st == 't' || st == 'Z'
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z'
}
