package grpcmw_test

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fenceguard/fenceguard/grpcmw"
	"github.com/fenceguard/fenceguard/token"
)

func newLoopInterceptor(t *testing.T, o grpcmw.Options) *grpcmw.Interceptor {
	t.Helper()
	if o.Resource == nil {
		o.Resource = loopResource
	}
	if o.Fence == nil {
		o.Fence = new(token.MemoryFence)
	}
	if o.KeyFromFirstMessage == nil {
		o.KeyFromFirstMessage = func(m string) bool { return m == loopFirst }
	}
	fg, err := grpcmw.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return fg
}

func openLoopStream(t *testing.T, ctx context.Context, cc *grpc.ClientConn, method string, tok token.Token) grpc.ClientStream {
	t.Helper()
	cs, err := cc.NewStream(loopWithToken(ctx, tok), &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// roundTrip sends msg on cs and returns the error of receiving its echo.
func roundTrip(cs grpc.ClientStream, msg string) error {
	if err := cs.SendMsg(wrapperspb.String(msg)); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return cs.RecvMsg(new(wrapperspb.StringValue))
}

// TestSerializePerKeyCoversUnaryAndStreams checks that an open stream
// holding a key keeps a unary call for the same key out until it ends:
// never two holders inside at once across call kinds.
func TestSerializePerKeyCoversUnaryAndStreams(t *testing.T) {
	fg := newLoopInterceptor(t, grpcmw.Options{SerializePerKey: true})
	cc := loopServe(t, fg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	for _, tc := range []struct {
		name, method, msg string
		base              token.Token
	}{
		{"keyed by method", loopStream, "x", 100},
		{"keyed by first message", loopFirst, "stream-key", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sctx, scancel := context.WithCancel(ctx)
			defer scancel()
			cs := openLoopStream(t, sctx, cc, tc.method, tc.base)
			if err := roundTrip(cs, tc.msg); err != nil {
				t.Fatalf("stream: %v", err)
			}
			short, cshort := context.WithTimeout(ctx, 300*time.Millisecond)
			err := loopPut(short, cc, "stream-key", tc.base+1)
			cshort()
			if c := status.Code(err); c != codes.DeadlineExceeded && c != codes.Unavailable {
				t.Fatalf("unary call while the stream holds the key: %v, want it kept waiting", err)
			}
			if err := cs.CloseSend(); err != nil {
				t.Fatal(err)
			}
			if err := cs.RecvMsg(new(wrapperspb.StringValue)); !errors.Is(err, io.EOF) {
				t.Fatalf("stream end: %v", err)
			}
			if err := loopPut(ctx, cc, "stream-key", tc.base+2); err != nil {
				t.Fatalf("unary call after the stream ended: %v", err)
			}
			if err := loopPut(ctx, cc, "stream-key", tc.base+1); status.Code(err) != codes.Aborted {
				t.Fatalf("stale unary: %v, want ABORTED", err)
			}
		})
	}
}

// TestCheckEachMessageEndsTheOldHolder checks that with CheckEachMessage a
// newer holder's claim between two messages ends the old holder's stream
// at its next message, keyed by method or by first message, and that the
// refused message does not move the mark.
func TestCheckEachMessageEndsTheOldHolder(t *testing.T) {
	fence := new(token.MemoryFence)
	fg := newLoopInterceptor(t, grpcmw.Options{Fence: fence, CheckEachMessage: true})
	cc := loopServe(t, fg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, method := range []string{loopStream, loopFirst} {
		base := token.Token(100 * (i + 1))
		cs := openLoopStream(t, ctx, cc, method, base)
		if err := roundTrip(cs, "stream-key"); err != nil {
			t.Fatalf("%s: first message: %v", method, err)
		}
		if err := loopPut(ctx, cc, "stream-key", base+1); err != nil {
			t.Fatalf("%s: newer holder: %v", method, err)
		}
		err := roundTrip(cs, "stream-key")
		if status.Code(err) != codes.Aborted {
			t.Fatalf("%s: old holder's next message: %v, want ABORTED", method, err)
		}
		if got := fence.HighWater("stream-key"); got != base+1 {
			t.Fatalf("%s: mark %d after the refusal, want %d", method, got, base+1)
		}
	}
}

// TestFirstMessageRefusalLeavesNoToken checks a stream keyed by its first
// message whose first message is stale: the refusal ends it with ABORTED,
// the mark stays, and a client that half-closes without sending claims
// nothing.
func TestFirstMessageRefusalLeavesNoToken(t *testing.T) {
	fence := new(token.MemoryFence)
	var accepted atomic.Int32
	fg := newLoopInterceptor(t, grpcmw.Options{Fence: fence, Observe: func(_ context.Context, _ string, o grpcmw.Outcome) {
		if o.Result == grpcmw.ResultAccepted {
			accepted.Add(1)
		}
	}})
	cc := loopServe(t, fg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := loopPut(ctx, cc, "k", 50); err != nil {
		t.Fatal(err)
	}
	cs := openLoopStream(t, ctx, cc, loopFirst, 40)
	if err := roundTrip(cs, "k"); status.Code(err) != codes.Aborted {
		t.Fatalf("stale first message: %v, want ABORTED", err)
	}
	if got := fence.HighWater("k"); got != 50 {
		t.Fatalf("mark %d, want 50", got)
	}

	cs = openLoopStream(t, ctx, cc, loopFirst, 60)
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(new(wrapperspb.StringValue)); !errors.Is(err, io.EOF) {
		t.Fatalf("half-closed stream: %v, want a clean end", err)
	}
	if got := fence.HighWater("k"); got != 50 {
		t.Fatalf("mark %d after a stream that sent nothing, want 50", got)
	}
	if accepted.Load() != 1 {
		t.Fatalf("%d accepted claims, want 1 (the unary call)", accepted.Load())
	}
}

// TestSerializePerKeyWaiterGivesUp checks that a call waiting for a key an
// open stream holds — a unary call, a stream keyed by its method, a
// stream keyed by its first message, waiting inside RecvMsg — ends when
// its client gives up, and leaves the key to the next call once the
// holder ends (goleak in TestMain sees any waiter left behind).
func TestSerializePerKeyWaiterGivesUp(t *testing.T) {
	fg := newLoopInterceptor(t, grpcmw.Options{SerializePerKey: true})
	cc := loopServe(t, fg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hctx, hcancel := context.WithCancel(ctx)
	holder := openLoopStream(t, hctx, cc, loopStream, 100)
	if err := roundTrip(holder, "x"); err != nil {
		t.Fatalf("holder: %v", err)
	}
	waiters := map[string]func(context.Context) error{
		"unary": func(ctx context.Context) error { return loopPut(ctx, cc, "stream-key", 101) },
		"stream": func(ctx context.Context) error {
			return loopExchange(ctx, cc, loopStream, "x", 101)
		},
		"first message": func(ctx context.Context) error {
			return loopExchange(ctx, cc, loopFirst, "stream-key", 101)
		},
	}
	for name, wait := range waiters {
		wctx, wcancel := context.WithCancel(ctx)
		time.AfterFunc(200*time.Millisecond, wcancel)
		if err := wait(wctx); status.Code(err) != codes.Canceled {
			t.Errorf("%s waiter: %v, want it cancelled while waiting", name, err)
		}
		wcancel()
	}
	hcancel()
	for _, name := range []string{"unary", "stream", "first message"} {
		if err := waiters[name](ctx); err != nil {
			t.Fatalf("%s after the holder ended: %v", name, err)
		}
	}
}
