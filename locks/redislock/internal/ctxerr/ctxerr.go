// Package ctxerr makes the error of a lock call cut short by its context
// say so: errors.Is(err, context.DeadlineExceeded) (or context.Canceled)
// holds whenever the caller's context is what ended the call.
//
// go-redis reports a command cut short by its context's deadline as the
// socket's i/o timeout (with ContextTimeoutEnabled the socket's deadline
// is the context's), and that deadline can fire before the context's own
// timer marks the context done: at that moment ctx.Err() is still nil.
// Wrap therefore also counts a timeout at or past the context's deadline
// as the deadline.
package ctxerr

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// Wrap returns err with ctx's error added when ctx has ended — or its
// deadline has passed and err is a timeout — and err does not say so
// already. A nil err stays nil.
func Wrap(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	cerr := ctx.Err()
	if cerr == nil {
		var ne net.Error
		if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) && errors.As(err, &ne) && ne.Timeout() {
			cerr = context.DeadlineExceeded
		}
	}
	if cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w: %w", cerr, err)
	}
	return err
}
