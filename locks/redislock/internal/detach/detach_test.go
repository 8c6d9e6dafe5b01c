package detach

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestCallReturnsAtCancelAndWaitWaitsForTheRest(t *testing.T) {
	var g Group
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	ended := make(chan struct{})
	time.AfterFunc(20*time.Millisecond, cancel)
	_, pending, err := Start(&g, ctx, func() (int, error) {
		<-release
		defer close(ended)
		return 1, nil
	})
	if !errors.Is(err, context.Canceled) || pending == nil {
		t.Fatalf("Start = %v, pending %v; want context.Canceled and a pending channel", err, pending)
	}
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		g.Wait()
	}()
	select {
	case <-waited:
		t.Fatal("Wait returned while fn still ran")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-pending
	<-ended
	<-waited
}

func TestCallReturnsTheResult(t *testing.T) {
	var g Group
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	want := errors.New("boom")
	if v, err := Call(&g, ctx, func() (int, error) { return 7, want }); v != 7 || err != want {
		t.Errorf("Call = %d, %v; want 7, %v", v, err, want)
	}
	if v, err := Call(nil, context.Background(), func() (int, error) { return 8, nil }); v != 8 || err != nil {
		t.Errorf("Call without Done = %d, %v; want 8, nil", v, err)
	}
	cancel()
	ran := false
	if _, err := Call(&g, ctx, func() (int, error) { ran = true; return 0, nil }); !errors.Is(err, context.Canceled) || ran {
		t.Errorf("Call on a done ctx = %v, ran %v; want context.Canceled, not run", err, ran)
	}
	g.Wait()
}
