package grpcmw_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/fenceguard/fenceguard/grpcmw"
	"github.com/fenceguard/fenceguard/token"
)

// With SerializePerKey, calls for one key run their handlers one at a
// time, from before the claim until the handler returns.
func TestSerializePerKey(t *testing.T) {
	fence := &token.MemoryFence{}
	o := testOptions(fence)
	o.SerializePerKey = true
	s := startServer(t, o)
	var inside, most atomic.Int64
	s.stock.hook = func(context.Context) error {
		n := inside.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(2 * time.Millisecond)
		inside.Add(-1)
		return nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			if _, err := call(withToken(context.Background(), "7"), s.conn, methodTake, "1"); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if m := most.Load(); m != 1 {
		t.Fatalf("%d handlers of one key ran at once", m)
	}
	if n := grpcmw.KeysHeld(s.ic); n != 0 {
		t.Errorf("%d keys still held after every call returned", n)
	}
}

// A call that ends while it waits for its key is refused UNAVAILABLE, and
// claims nothing.
func TestSerializeWaitEnds(t *testing.T) {
	fence := &token.MemoryFence{}
	o := testOptions(fence)
	o.SerializePerKey = true
	gaveUp := make(chan struct{}, 1)
	o.Observe = func(_ context.Context, _ string, oc grpcmw.Outcome) {
		if oc.Result == grpcmw.ResultUnavailable {
			gaveUp <- struct{}{}
		}
	}
	s := startServer(t, o)
	holding, release := make(chan struct{}), make(chan struct{})
	s.stock.hook = func(context.Context) error {
		close(holding) // only the first call may get here
		<-release
		return nil
	}
	first := make(chan error, 1)
	go func() {
		_, err := call(withToken(context.Background(), "7"), s.conn, methodTake, "1")
		first <- err
	}()
	<-holding
	ctx, cancel := context.WithTimeout(withToken(context.Background(), "8"), 100*time.Millisecond)
	defer cancel()
	_, err := call(ctx, s.conn, methodTake, "1")
	// The server gives up on its own deadline, which may come after the
	// client's: hold the key until it has.
	select {
	case <-gaveUp:
	case <-time.After(10 * time.Second):
		t.Error("the waiting call was never refused on the server")
	}
	close(release)
	if code := codeOf(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
		t.Errorf("waiting call = %v, want UNAVAILABLE (or the client's own deadline)", err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if hw := fence.HighWater("sku:1"); hw != 7 {
		t.Errorf("mark = %d, want 7: the call that gave up claimed", hw)
	}
}
