package grpcmw_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fenceguard/fenceguard/grpcmw"
	"github.com/fenceguard/fenceguard/token"
)

// TestTokenSpellingsOverTheWire sends, through grpc-go's own client,
// values that other parsers read as a number, and checks that each is
// refused before any mark moves. grpc-go's client itself refuses to send
// the tab and the non-ASCII digits (INTERNAL).
func TestTokenSpellingsOverTheWire(t *testing.T) {
	fence := new(token.MemoryFence)
	fg := newLoopInterceptor(t, grpcmw.Options{Fence: fence, Check: token.CheckFunc(func(context.Context, string, token.Token) error { return nil })})
	cc := loopServe(t, fg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := loopPut(ctx, cc, "k", 5); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		value string
	}{
		{"leading zero", "07"},
		{"plus sign", "+7"},
		{"leading space", " 7"},
		{"trailing space", "7 "},
		{"tab", "7\t"},
		{"minus", "-7"},
		{"zero", "0"},
		{"hex", "0x7"},
		{"exponent", "7e1"},
		{"underscore", "1_0"},
		{"arabic-indic digits", "\u0667"},
		{"fullwidth digits", "\uff17"},
		{"list", "7,8"},
		{"2^64", "18446744073709551616"},
		{"empty", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cctx := metadata.AppendToOutgoingContext(ctx, grpcmw.MetadataKey, tc.value)
			err := cc.Invoke(cctx, loopUnary, wrapperspb.String("k"), new(wrapperspb.StringValue))
			if c := status.Code(err); c != codes.InvalidArgument && c != codes.Internal {
				t.Fatalf("%q: %v, want INVALID_ARGUMENT (or the client refusing to send it)", tc.value, err)
			}
			if got := fence.HighWater("k"); got != 5 {
				t.Fatalf("%q moved the mark to %d", tc.value, got)
			}
		})
	}
}

// TestFencedSelectsMethods checks that with the default Fenced every
// method — the health service's included — needs a token, and that a
// Fenced that leaves a method out lets it through with none.
func TestFencedSelectsMethods(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name   string
		fenced func(string) bool
		want   codes.Code
	}{
		{"default", nil, codes.FailedPrecondition},
		{"health left out", func(m string) bool { return m != "/loop.Svc/Health" }, codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fg := newLoopInterceptor(t, grpcmw.Options{Fenced: tc.fenced})
			cc := loopServe(t, fg)
			err := cc.Invoke(ctx, "/loop.Svc/Health", wrapperspb.String("k"), new(wrapperspb.StringValue))
			if status.Code(err) != tc.want {
				t.Fatalf("tokenless health call: %v, want %v", err, tc.want)
			}
			err = cc.Invoke(ctx, loopUnary, wrapperspb.String("k"), new(wrapperspb.StringValue))
			if status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("tokenless fenced call: %v, want FAILED_PRECONDITION", err)
			}
		})
	}
}
