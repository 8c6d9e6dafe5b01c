package grpcmw_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fenceguard/fenceguard/grpcmw"
	"github.com/fenceguard/fenceguard/token"
)

// panickyFence panics on the claims its hook says to, and delegates the
// rest to a MemoryFence.
type panickyFence struct {
	inner token.Fence
	boom  atomic.Bool
}

func (f *panickyFence) Claim(ctx context.Context, key string, t token.Token) error {
	if f.boom.CompareAndSwap(true, false) {
		panic("fence: boom")
	}
	return f.inner.Claim(ctx, key, t)
}

// TestSerializePerKeySurvivesPanics checks that a panic while the per-key
// mutex is held — in the Fence's Claim or in Observe, both user code —
// does not leave the key locked when a recovery interceptor keeps the
// server up: the next call for the key must go through, not wait until
// its deadline.
func TestSerializePerKeySurvivesPanics(t *testing.T) {
	type call func(ctx context.Context, cc *grpc.ClientConn, t token.Token) error
	calls := map[string]call{
		"unary": func(ctx context.Context, cc *grpc.ClientConn, t token.Token) error {
			return loopPut(ctx, cc, "k", t)
		},
		"stream": func(ctx context.Context, cc *grpc.ClientConn, t token.Token) error {
			return loopExchange(ctx, cc, loopStream, "x", t)
		},
		"first message": func(ctx context.Context, cc *grpc.ClientConn, t token.Token) error {
			return loopExchange(ctx, cc, loopFirst, "k", t)
		},
	}
	for _, where := range []string{"fence", "observe"} {
		for name, do := range calls {
			t.Run(where+"/"+name, func(t *testing.T) {
				fence := &panickyFence{inner: new(token.MemoryFence)}
				var observeBoom atomic.Bool
				fg, err := grpcmw.New(grpcmw.Options{
					Resource:            loopResource,
					Fence:               fence,
					SerializePerKey:     true,
					KeyFromFirstMessage: func(m string) bool { return m == loopFirst },
					Observe: func(_ context.Context, _ string, o grpcmw.Outcome) {
						if o.Result == grpcmw.ResultAccepted && observeBoom.CompareAndSwap(true, false) {
							panic("observe: boom")
						}
					},
				})
				if err != nil {
					t.Fatal(err)
				}
				cc := loopServe(t, fg)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if where == "fence" {
					fence.boom.Store(true)
				} else {
					observeBoom.Store(true)
				}
				if err := do(ctx, cc, 10); status.Code(err) != codes.Internal {
					t.Fatalf("panicking call: %v, want INTERNAL from the recovery interceptor", err)
				}
				short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
				defer cancelShort()
				if err := do(short, cc, 11); err != nil {
					t.Fatalf("next call for the key: %v, want it served (the panic left the key locked?)", err)
				}
			})
		}
	}
}
