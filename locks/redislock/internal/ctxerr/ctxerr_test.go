package ctxerr_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fenceguard/fenceguard/locks/redislock/internal/ctxerr"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// timerLate is a context whose deadline has passed but whose timer has not
// yet marked it done — the moment at which go-redis's socket deadline
// (the context's) fires first.
type timerLate struct {
	context.Context
	deadline time.Time
}

func (c timerLate) Deadline() (time.Time, bool) { return c.deadline, true }
func (c timerLate) Err() error                  { return nil }

type ioTimeout struct{}

func (ioTimeout) Error() string   { return "read tcp 127.0.0.1:1->127.0.0.1:2: i/o timeout" }
func (ioTimeout) Timeout() bool   { return true }
func (ioTimeout) Temporary() bool { return true }

var _ net.Error = ioTimeout{}

// An i/o timeout at the context's deadline is the deadline, even before
// ctx.Err() says so (CI caught a redislock Release cut short by its
// context returning the bare i/o timeout).
func TestWrapBeforeTheTimer(t *testing.T) {
	late := timerLate{context.Background(), time.Now().Add(-time.Millisecond)}
	if err := ctxerr.Wrap(late, ioTimeout{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("i/o timeout past the deadline: %v, want it to match context.DeadlineExceeded", err)
	}
	joined := errors.Join(ioTimeout{}, ioTimeout{})
	if err := ctxerr.Wrap(late, joined); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("joined i/o timeouts past the deadline: %v", err)
	}
	if err := ctxerr.Wrap(late, errors.New("ERR something")); errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a server error is not the deadline: %v", err)
	}
	early := timerLate{context.Background(), time.Now().Add(time.Hour)}
	if err := ctxerr.Wrap(early, ioTimeout{}); errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("an i/o timeout before the deadline (a ReadTimeout, a node's timeout) is not the context's: %v", err)
	}
	if err := ctxerr.Wrap(late, nil); err != nil {
		t.Errorf("nil: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ctxerr.Wrap(ctx, ioTimeout{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if err := ctxerr.Wrap(ctx, context.Canceled); err != context.Canceled {
		t.Errorf("already the context's error: %v, want it unchanged", err)
	}
}
