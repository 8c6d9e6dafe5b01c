package grpcmw_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fenceguard/fenceguard/grpcmw"
	"github.com/fenceguard/fenceguard/token"
)

// A service whose Take method is fenced per SKU, the request naming the
// SKU, and a client whose calls carry the token of the lease in their
// context. Holder 7 is served; once holder 8 has taken the SKU, holder 7
// is refused as stale, and its error says so.
func Example() {
	// The server: the key comes from the request message.
	fg, err := grpcmw.New(grpcmw.Options{
		Resource: func(_ context.Context, _ string, req any) (string, error) {
			if sku, ok := req.(*wrapperspb.StringValue); ok && sku.GetValue() != "" {
				return "sku:" + sku.GetValue(), nil
			}
			return "", errors.New("no SKU")
		},
		Fence: &token.MemoryFence{},
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(fg.UnaryServerInterceptor()))
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "example.Stock",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Take", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			req := new(wrapperspb.StringValue)
			if err := dec(req); err != nil {
				return nil, err
			}
			take := func(ctx context.Context, _ any) (any, error) {
				key, t, _ := token.FromContext(ctx) // what the interceptor accepted
				fmt.Printf("  handler: %s under token %d\n", key, t)
				return req, nil
			}
			return ic(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/example.Stock/Take"}, take)
		}}},
	}, struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	// The client: the same key, from the same request message.
	client := &grpcmw.Client{Key: func(_ string, req any) (string, bool) {
		sku, ok := req.(*wrapperspb.StringValue)
		return "sku:" + sku.GetValue(), ok && sku.GetValue() != ""
	}}
	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(client.UnaryClientInterceptor()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	take := func(ctx context.Context) error {
		return conn.Invoke(ctx, "/example.Stock/Take", wrapperspb.String("42"), new(wrapperspb.StringValue))
	}

	// guard.Do puts the lease's key and token into its function's
	// context; here two holders' contexts are made by hand.
	ctx := context.Background()
	fmt.Println("holder 7:", take(token.NewContext(ctx, "sku:42", 7)))
	fmt.Println("holder 8:", take(token.NewContext(ctx, "sku:42", 8)))
	err = take(token.NewContext(ctx, "sku:42", 7))
	var se *token.StaleError
	if errors.As(err, &se) {
		fmt.Printf("holder 7: %v: stale, the resource has seen %d\n", status.Code(err), se.Current)
	}
	// Output:
	//   handler: sku:42 under token 7
	// holder 7: <nil>
	//   handler: sku:42 under token 8
	// holder 8: <nil>
	// holder 7: Aborted: stale, the resource has seen 8
}
