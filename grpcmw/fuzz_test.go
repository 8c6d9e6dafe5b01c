package grpcmw_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fenceguard/fenceguard/grpcmw"
	"github.com/fenceguard/fenceguard/token"
)

// FuzzUnaryInterceptor drives the whole server interceptor with any
// metadata and any request: it never panics; a refusal is a status with
// its ErrorInfo, never runs the handler and moves no mark; an acceptance
// hands the handler exactly the token sent, for the key of the request,
// which is then the mark.
//
//	go test -run '^$' -fuzz FuzzUnaryInterceptor -fuzztime 60s -fuzzminimizetime 2s ./grpcmw/
func FuzzUnaryInterceptor(f *testing.F) {
	for _, seed := range []struct {
		first, second string
		values        uint8
		binary        bool
		sku           string
	}{
		{"7", "", 1, false, "1"},
		{"7", "8", 2, false, "1"},
		{"", "", 0, false, "1"},
		{"7", "", 1, true, "1"},
		{"05", "", 1, false, "1"},
		{"18446744073709551615", "", 1, false, "1"},
		{"18446744073709551616", "", 1, false, "1"},
		{"１２", "", 1, false, "1"},
		{"7", "", 1, false, ""},
		{"7", "", 1, false, "a\x00b"},
		{"7", "", 1, false, strings.Repeat("x", 600)},
		{"\xff", "7", 3, false, "\u202e"},
	} {
		f.Add(seed.first, seed.second, seed.values, seed.binary, seed.sku)
	}
	fence := &token.MemoryFence{Check: token.NoCheck()}
	ic, err := grpcmw.New(grpcmw.Options{Resource: skuKey, Fence: fence})
	if err != nil {
		f.Fatal(err)
	}
	unary := ic.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: methodTake}
	f.Fuzz(func(t *testing.T, first, second string, values uint8, binary bool, sku string) {
		md := metadata.MD{}
		for i := range int(values % 4) {
			v := first
			if i > 0 {
				v = second
			}
			md.Append(grpcmw.MetadataKey, v)
		}
		if binary {
			md.Append(grpcmw.MetadataKey+"-bin", first)
		}
		ctx := metadata.NewIncomingContext(context.Background(), md)
		req := wrapperspb.String(sku)
		key, keyErr := skuKey(ctx, methodTake, req)
		before := fence.HighWater(key)
		ran := false
		var seenKey string
		var seenTok token.Token
		_, err := unary(ctx, req, info, func(ctx context.Context, _ any) (any, error) {
			ran = true
			seenKey, seenTok, _ = token.FromContext(ctx)
			return nil, nil
		})
		if err != nil {
			if ran {
				t.Fatalf("refused (%v) after the handler ran", err)
			}
			if errorInfo(err) == nil || status.Code(err) == codes.OK || status.Code(err) == codes.Unknown {
				t.Fatalf("refusal %v without its status and ErrorInfo", err)
			}
			if keyErr == nil && fence.HighWater(key) != before {
				t.Fatalf("a refusal moved the mark of %q from %d to %d", key, before, fence.HighWater(key))
			}
			return
		}
		want, perr := token.Parse(first)
		switch {
		case !ran:
			t.Fatal("accepted without running the handler")
		case values%4 != 1 || binary || perr != nil || keyErr != nil:
			t.Fatalf("accepted %q (values %d, binary %v, sku %q)", first, values%4, binary, sku)
		case seenKey != key || seenTok != want:
			t.Fatalf("handler saw %q=%d, want %q=%d", seenKey, seenTok, key, want)
		case want < before:
			t.Fatalf("accepted %d below the mark %d", want, before)
		case fence.HighWater(key) != want:
			t.Fatalf("mark of %q = %d after accepting %d", key, fence.HighWater(key), want)
		}
	})
}
