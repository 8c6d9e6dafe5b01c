package zkserver

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fenceguard/fenceguard/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }

// zkConn returns a session on addrs once it is connected, closed at the
// end of the test.
func zkConn(t *testing.T, addrs []string) *zk.Conn {
	t.Helper()
	c, events, err := zk.Connect(addrs, 5*time.Second, zk.WithLogger(nopLogger{}), zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return c
			}
		case <-timeout:
			t.Fatalf("no session with %v", addrs)
		}
	}
}

func ctxFor(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

func eventually(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	harness.Eventually(t, d, func() error {
		if err := cond(); err != nil {
			return errors.New(what + ": " + err.Error())
		}
		return nil
	})
}
