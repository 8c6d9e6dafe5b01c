// Consumer: fenceguard's gRPC interceptors on a plain grpc service (the
// health service, so that no generated code is needed), and its client.
package main

import (
	"context"
	"errors"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fenceguard/fenceguard/grpcmw"
	"github.com/fenceguard/fenceguard/token"
)

func key(_ context.Context, _ string, req any) (string, error) {
	if r, ok := req.(*healthpb.HealthCheckRequest); ok && r.GetService() != "" {
		return "svc:" + r.GetService(), nil
	}
	return "", errors.New("no service")
}

func main() {
	fg, err := grpcmw.New(grpcmw.Options{Resource: key, Fence: &token.MemoryFence{}})
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(fg.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(fg.StreamServerInterceptor()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	c := &grpcmw.Client{Key: func(method string, req any) (string, bool) {
		k, err := key(context.Background(), method, req)
		return k, err == nil
	}}
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(c.UnaryClientInterceptor()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	ctx := token.NewContext(context.Background(), "svc:stock", 1)
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "stock"})
	if err != nil && !errors.Is(err, token.ErrStale) {
		panic(err)
	}
}
