//go:build !linux

package harness

import "time"

// runDelay reports that the run-queue delay of the process's threads is not
// known here; Lateness then relies on its own wake-ups alone.
func runDelay() (time.Duration, bool) { return 0, false }
