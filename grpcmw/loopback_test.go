package grpcmw_test

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fenceguard/fenceguard/grpcmw"
	"github.com/fenceguard/fenceguard/token"
)

// loopRecover is the usual recovery interceptor (outermost in the chain):
// it turns a panic into INTERNAL and keeps the server up.
func loopRecover(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = status.Errorf(codes.Internal, "panic: %v", r)
		}
	}()
	return h(ctx, req)
}

func loopRecoverStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = status.Errorf(codes.Internal, "panic: %v", r)
		}
	}()
	return h(srv, ss)
}

const (
	loopUnary  = "/loop.Svc/Put"
	loopStream = "/loop.Svc/Stream"
	loopFirst  = "/loop.Svc/First"
)

// loopServiceDesc is a hand-written service on wrapperspb messages: a
// unary Put whose request value is the resource key, a bidi Stream keyed
// by its method, and a bidi First keyed by its first message. Each
// handler echoes what it received; Health, unary, answers its request.
func loopServiceDesc() *grpc.ServiceDesc {
	echoStream := func(_ any, ss grpc.ServerStream) error {
		for {
			m := new(wrapperspb.StringValue)
			if err := ss.RecvMsg(m); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
			if err := ss.SendMsg(m); err != nil {
				return err
			}
		}
	}
	return &grpc.ServiceDesc{
		ServiceName: "loop.Svc",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{
			{MethodName: "Put", Handler: loopEcho(loopUnary)},
			{MethodName: "Health", Handler: loopEcho("/loop.Svc/Health")},
		},
		Streams: []grpc.StreamDesc{
			{StreamName: "Stream", Handler: echoStream, ServerStreams: true, ClientStreams: true},
			{StreamName: "First", Handler: echoStream, ServerStreams: true, ClientStreams: true},
		},
	}
}

// loopEcho is a unary handler for fullMethod that answers its request.
func loopEcho(fullMethod string) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(_ context.Context, req any) (any, error) { return req, nil }
		if icpt == nil {
			return h(ctx, in)
		}
		return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: fullMethod}, h)
	}
}

// loopResource keys Put by its request, Stream by its method, First by its
// first message.
func loopResource(_ context.Context, method string, req any) (string, error) {
	switch method {
	case loopUnary, loopFirst:
		if r, ok := req.(*wrapperspb.StringValue); ok {
			return r.GetValue(), nil
		}
	case loopStream:
		return "stream-key", nil
	}
	return "", errors.New("not fenced")
}

// loopServeAddr starts a real gRPC server on loopback with fg's
// interceptors behind the recovery interceptors, and returns its address.
func loopServeAddr(t *testing.T, fg *grpcmw.Interceptor) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(loopRecover, fg.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(loopRecoverStream, fg.StreamServerInterceptor()))
	srv.RegisterService(loopServiceDesc(), struct{}{})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// loopServe starts a server as loopServeAddr does and returns a
// connection to it.
func loopServe(t *testing.T, fg *grpcmw.Interceptor) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(loopServeAddr(t, fg), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func loopWithToken(ctx context.Context, t token.Token) context.Context {
	return metadata.AppendToOutgoingContext(ctx, grpcmw.MetadataKey, t.String())
}

func loopPut(ctx context.Context, cc *grpc.ClientConn, key string, t token.Token) error {
	return cc.Invoke(loopWithToken(ctx, t), loopUnary, wrapperspb.String(key), new(wrapperspb.StringValue))
}

// loopExchange opens method with token t, sends msg, and returns the error
// of the first receive.
func loopExchange(ctx context.Context, cc *grpc.ClientConn, method, msg string, t token.Token) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cs, err := cc.NewStream(loopWithToken(ctx, t), &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		return err
	}
	if err := cs.SendMsg(wrapperspb.String(msg)); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if err := cs.CloseSend(); err != nil {
		return err
	}
	if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != nil {
		return err
	}
	for {
		if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}
