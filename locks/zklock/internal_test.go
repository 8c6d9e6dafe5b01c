package zklock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/locks"
)

func name(prefix string, n int32) string { return fmt.Sprintf("%s-%010d", prefix, n) }

// The queue's order holds across the wrap of ZooKeeper's signed 32-bit
// sequence counter, names of 11 characters ("-2147483648") included.
func TestPredecessorAcrossTheWrap(t *testing.T) {
	t.Parallel()
	const maxI32, minI32 = int32(2147483647), int32(-2147483648)
	for _, c := range []struct {
		name     string
		seqs     []int32 // the queue, in arrival order
		me       int     // index of the asking znode
		wantPred int     // index of its predecessor, -1 for none
		wantHead bool
	}{
		{"plain", []int32{5, 6, 7}, 2, 1, false},
		{"plain head", []int32{5, 6, 7}, 1, 0, true},
		{"first", []int32{5, 6, 7}, 0, -1, false},
		{"across the wrap", []int32{maxI32 - 1, maxI32, minI32, minI32 + 1}, 2, 1, false},
		{"after the wrap, head before it", []int32{maxI32, minI32}, 1, 0, true},
		{"holder before the wrap is still first", []int32{maxI32, minI32, minI32 + 1}, 0, -1, false},
		{"eleven characters", []int32{minI32, minI32 + 1}, 1, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var children []string
			for i, q := range c.seqs {
				children = append(children, name(fmt.Sprintf("RAND%d", i), q))
			}
			// ZooKeeper lists children in no particular order.
			shuffled := append([]string(nil), children[len(children)/2:]...)
			shuffled = append(shuffled, children[:len(children)/2]...)
			pred, head, found := predecessor(shuffled, children[c.me])
			if !found {
				t.Fatalf("%s not found in %v", children[c.me], shuffled)
			}
			want := ""
			if c.wantPred >= 0 {
				want = children[c.wantPred]
			}
			if pred != want || head != c.wantHead {
				t.Fatalf("predecessor(%v, %s) = %q, head %v; want %q, head %v", shuffled, children[c.me], pred, head, want, c.wantHead)
			}
			// The Sequencer's holder is the queue's first, in the same order.
			if first, ok := queueHead(shuffled); !ok || first != children[0] {
				t.Fatalf("queueHead(%v) = %q, %v; want %q", shuffled, first, ok, children[0])
			}
		})
	}
	if _, ok := seq(name("X", minI32)); !ok {
		t.Errorf("seq(%q) failed", name("X", minI32))
	}
}

// Release on a lease whose session has just gone down (the event is being
// delivered to its leases) reports the loss; it used to call itself while
// holding the lease's operation lock, and hang.
func TestReleaseWhileSessionDown(t *testing.T) {
	t.Parallel()
	l, err := New([]string{"127.0.0.1:1"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := newSession(l, time.Second)
	close(s.dialed) // never dialled; down
	le := &Lease{s: s, key: "k", path: "/x/k/A-0000000001", czxid: 9, owner: 7, ttl: time.Second, done: make(chan struct{})}
	le.timer = time.AfterFunc(time.Hour, le.lapse)
	s.leases[le] = struct{}{}
	done := make(chan error, 1)
	go func() { done <- le.Release(context.Background()) }()
	select {
	case err := <-done:
		if !errors.Is(err, locks.ErrNotHeld) {
			t.Errorf("Release: %v, want ErrNotHeld", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Release hung")
	}
	select {
	case <-le.Lost():
	default:
		t.Error("Lost not closed")
	}
	if err := l.Close(); err != nil { // stops the background removal waiting for a session
		t.Fatal(err)
	}
}

// With no ensemble to reach, TryAcquire and Issued give up after
// SessionWait with errNoSession, even with a context that never ends;
// Acquire waits as long as its context allows.
func TestNoSessionWithinSessionWait(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused
	l, err := New([]string{addr}, Options{SessionWait: 300 * time.Millisecond, Logger: discard{}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	start := time.Now()
	if _, err := l.TryAcquire(context.Background(), "k", 500*time.Millisecond); !errors.Is(err, errNoSession) {
		t.Errorf("TryAcquire: %v, want errNoSession", err)
	}
	if took := time.Since(start); took < 500*time.Millisecond {
		t.Errorf("TryAcquire gave up after %v, before its TTL", took)
	}
	if _, err := l.Issued(context.Background(), "k"); !errors.Is(err, errNoSession) {
		t.Errorf("Issued: %v, want errNoSession", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(ctx, "k", 500*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire: %v, want its context's deadline", err)
	}
	if _, err := New([]string{addr}, Options{SessionWait: -time.Second}); !errors.Is(err, locks.ErrInvalidArgument) {
		t.Errorf("negative SessionWait: %v, want ErrInvalidArgument", err)
	}
}

type discard struct{}

func (discard) Printf(string, ...any) {}
