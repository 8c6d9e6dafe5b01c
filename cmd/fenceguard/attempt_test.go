package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
)

// A wait that ran out while a request was on the wire (the client's socket
// deadline is the context's) is not a failed attempt: acquire then asks the
// service whether it answers, and a lock held all along exits 75, not 69.
// An attempt the service refused is one.
func TestFailedAttemptTellsTheWaitsEndFromAFailure(t *testing.T) {
	cutOff := &net.OpError{Op: "write", Net: "tcp", Err: os.ErrDeadlineExceeded}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"waited its turn", fmt.Errorf("guard: acquire %q: %w", "k", context.DeadlineExceeded), false},
		{"cut off by the wait's end", fmt.Errorf("guard: acquire %q: %w: %w", "k", context.DeadlineExceeded, cutOff), false},
		{"refused", fmt.Errorf("guard: acquire %q: %w: %w", "k", context.DeadlineExceeded, refused), true},
		{"other error", fmt.Errorf("guard: acquire %q: %w: %w", "k", context.DeadlineExceeded, errors.New("OOM command not allowed")), true},
	} {
		if got := failedAttempt(c.err); got != c.want {
			t.Errorf("%s: failedAttempt(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
