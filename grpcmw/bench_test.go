package grpcmw_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fenceguard/fenceguard/grpcmw"
	"github.com/fenceguard/fenceguard/token"
)

// benchToken is the token every benchmark call carries: below the clock,
// as a clock-floored token granted in the past is, and equal to the mark
// after the first call, so every call takes the success path.
const benchToken token.Token = 1717171717171717

type ctxFloorKey struct{}

var ctxFloorValue = new(int)

// A unary call over loopback TCP to the same method (Echo, whose handler
// does the same work whatever its context carries), bare and behind the
// interceptor with a MemoryFence; "fenced+client" also sends the token
// through a Client from the call's context. The difference to bare is
// the overhead; bare+interceptor is the floor under fenced.
//
//	go test -run '^$' -bench UnaryCall -benchmem -count 10 ./grpcmw/
func BenchmarkUnaryCall(b *testing.B) {
	ctx := context.Background()
	withMD := metadata.AppendToOutgoingContext(ctx, grpcmw.MetadataKey, benchToken.String())
	fenced := func(b *testing.B) *server {
		return startServer(b, grpcmw.Options{Resource: skuKey, Fence: &token.MemoryFence{}})
	}
	for _, bc := range []struct {
		name string
		conn func(b *testing.B) *grpc.ClientConn
		ctx  context.Context
	}{
		{"bare", func(b *testing.B) *grpc.ClientConn { return startGRPC(b).conn }, withMD},
		// The floor of any interceptor that hands the handler a value in
		// its context: grpc-go's interceptor path and one context node.
		{"bare+interceptor", func(b *testing.B) *grpc.ClientConn {
			return startGRPC(b, grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				return h(context.WithValue(ctx, ctxFloorKey{}, ctxFloorValue), req)
			})).conn
		}, withMD},
		{"fenced", func(b *testing.B) *grpc.ClientConn { return fenced(b).conn }, withMD},
		{"fenced+client", func(b *testing.B) *grpc.ClientConn {
			c := &grpcmw.Client{Key: clientKey}
			return dial(b, fenced(b).addr, grpc.WithChainUnaryInterceptor(c.UnaryClientInterceptor()))
		}, token.NewContext(ctx, "sku:42", benchToken)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			conn := bc.conn(b)
			req, out := wrapperspb.String("42"), new(wrapperspb.StringValue)
			b.ReportAllocs()
			for b.Loop() {
				if err := conn.Invoke(bc.ctx, methodEcho, req, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The server interceptor alone, called as grpc-go calls it, without the
// network: its own cost, which the loopback call's noise hides.
//
//	go test -run '^$' -bench UnaryInterceptor -benchmem -count 10 ./grpcmw/
func BenchmarkUnaryInterceptor(b *testing.B) {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(grpcmw.MetadataKey, benchToken.String(), "user-agent", "grpc-go"))
	req := wrapperspb.String("42")
	info := &grpc.UnaryServerInfo{FullMethod: methodTake}
	handler := func(ctx context.Context, req any) (any, error) { return req, nil }
	for _, bc := range []struct {
		name string
		o    grpcmw.Options
	}{
		{"fenced", grpcmw.Options{}},
		{"fenced+serialized", grpcmw.Options{SerializePerKey: true}},
		{"fenced,NoCheck", grpcmw.Options{Check: token.NoCheck()}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			bc.o.Resource, bc.o.Fence = skuKey, &token.MemoryFence{Check: bc.o.Check}
			ic, err := grpcmw.New(bc.o)
			if err != nil {
				b.Fatal(err)
			}
			unary := ic.UnaryServerInterceptor()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := unary(ctx, req, info, handler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
