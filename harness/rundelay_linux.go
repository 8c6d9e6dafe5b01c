package harness

import (
	"bytes"
	"os"
	"strconv"
	"time"
)

// runDelay returns the time the process's threads have spent, in all,
// runnable but waiting for a CPU (the second field of each thread's
// /proc/self/task/*/schedstat), and false where the kernel does not say.
func runDelay() (time.Duration, bool) {
	dir, err := os.Open("/proc/self/task")
	if err != nil {
		return 0, false
	}
	defer dir.Close()
	tids, err := dir.Readdirnames(-1)
	if err != nil {
		return 0, false
	}
	var sum time.Duration
	ok := false
	for _, tid := range tids {
		b, err := os.ReadFile("/proc/self/task/" + tid + "/schedstat")
		if err != nil {
			continue // the thread has exited, or the kernel has no schedstats
		}
		f := bytes.Fields(b)
		if len(f) < 2 {
			continue
		}
		ns, err := strconv.ParseInt(string(f[1]), 10, 64)
		if err != nil {
			continue
		}
		sum += time.Duration(ns)
		ok = true
	}
	return sum, ok
}
