package fakeclock_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fenceguard/fenceguard/harness/fakeclock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func TestTimersFireInOrderWhenDue(t *testing.T) {
	c := fakeclock.New(epoch)
	early, late := c.NewTimer(time.Second), c.NewTimer(3*time.Second)
	fired := make(chan time.Time, 1)
	c.AfterFunc(2*time.Second, func() { fired <- c.Now() })
	if n := c.Waiters(); n != 3 {
		t.Fatalf("%d waiters, want 3", n)
	}
	c.Advance(999 * time.Millisecond)
	select {
	case <-early.Chan():
		t.Fatal("fired before its time")
	default:
	}
	c.Advance(time.Millisecond)
	if got := <-early.Chan(); !got.Equal(epoch.Add(time.Second)) {
		t.Errorf("fired at %v", got)
	}
	c.Advance(time.Second)
	if got := <-fired; got.Before(epoch.Add(2 * time.Second)) {
		t.Errorf("AfterFunc ran at %v", got)
	}
	if late.Stop() != true || late.Stop() != false {
		t.Error("Stop of a pending timer must report true once")
	}
	c.Advance(time.Hour)
	select {
	case <-late.Chan():
		t.Fatal("a stopped timer fired")
	default:
	}
	if n := c.Waiters(); n != 0 {
		t.Errorf("%d waiters left", n)
	}
}

func TestResetAndBlockUntil(t *testing.T) {
	c := fakeclock.New(epoch)
	tm := c.NewTimer(time.Second)
	if !tm.Reset(5 * time.Second) {
		t.Error("Reset of a pending timer reported false")
	}
	c.Advance(4 * time.Second)
	select {
	case <-tm.Chan():
		t.Fatal("fired at its old time after Reset")
	default:
	}
	c.Advance(time.Second)
	<-tm.Chan()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.BlockUntil(ctx, 2) }()
	c.NewTimer(time.Minute)
	c.AfterFunc(time.Minute, func() {})
	if err := <-done; err != nil {
		t.Fatalf("BlockUntil: %v", err)
	}
	short, stop := context.WithCancel(context.Background())
	stop()
	if err := c.BlockUntil(short, 3); err == nil {
		t.Error("BlockUntil returned nil with its context done and too few timers")
	}
	// A timer due at once fires at once.
	now := c.NewTimer(0)
	<-now.Chan()
}
