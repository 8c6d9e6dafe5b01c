package grpcmw_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fenceguard/fenceguard/grpcmw"
	"github.com/fenceguard/fenceguard/token"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The test service, fenceguard.test.Stock, written by hand so that no
// protoc step is needed: its messages are well-known wrapper types.
//
//   - Take (unary, fenced, requires a token): the request names a SKU.
//   - Read (unary, fenced, a token optional).
//   - Ping (unary, not fenced).
//   - Echo (unary, fenced): answers its request, whatever its context
//     carries, so that its cost is the same fenced or not.
//   - Watch (server stream): receives its request, then sends the
//     context's key and token once.
//   - Feed (bidi stream): answers each message received with the
//     context's key and token.
//   - Greet (bidi stream): sends a greeting with the context's key and
//     token before it receives anything, keeps SendMsg's error, then
//     answers each message received as Feed does.
const (
	methodTake  = "/fenceguard.test.Stock/Take"
	methodRead  = "/fenceguard.test.Stock/Read"
	methodPing  = "/fenceguard.test.Stock/Ping"
	methodEcho  = "/fenceguard.test.Stock/Echo"
	methodWatch = "/fenceguard.test.Stock/Watch"
	methodFeed  = "/fenceguard.test.Stock/Feed"
	methodGreet = "/fenceguard.test.Stock/Greet"
)

// stock is the service's implementation: it counts the calls that reach
// it and answers with what its context carries.
type stock struct {
	calls atomic.Int64
	// hook, if set, runs inside every unary handler.
	hook func(ctx context.Context) error
	// greeted receives the error of each Greet's greeting.
	greeted chan error
}

// seen renders what a handler's context carries: "key=token", or "-".
func seen(ctx context.Context) *wrapperspb.StringValue {
	key, t, ok := token.FromContext(ctx)
	if !ok {
		return wrapperspb.String("-")
	}
	return wrapperspb.String(key + "=" + t.String())
}

func unaryHandler(method string) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, _ any) (any, error) {
			s := srv.(*stock)
			s.calls.Add(1)
			if s.hook != nil {
				if err := s.hook(ctx); err != nil {
					return nil, err
				}
			}
			return seen(ctx), nil
		}
		if ic == nil {
			return h(ctx, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: method}, h)
	}
}

var stockDesc = grpc.ServiceDesc{
	ServiceName: "fenceguard.test.Stock",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Take", Handler: unaryHandler(methodTake)},
		{MethodName: "Read", Handler: unaryHandler(methodRead)},
		{MethodName: "Ping", Handler: unaryHandler(methodPing)},
		{MethodName: "Echo", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			if ic == nil {
				return in, nil
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: methodEcho}, echo)
		}},
	},
	Streams: []grpc.StreamDesc{
		{StreamName: "Watch", ServerStreams: true, Handler: func(srv any, ss grpc.ServerStream) error {
			srv.(*stock).calls.Add(1)
			in := new(wrapperspb.StringValue)
			if err := ss.RecvMsg(in); err != nil {
				return err
			}
			return ss.SendMsg(seen(ss.Context()))
		}},
		{StreamName: "Feed", ServerStreams: true, ClientStreams: true, Handler: func(srv any, ss grpc.ServerStream) error {
			srv.(*stock).calls.Add(1)
			return answer(ss)
		}},
		{StreamName: "Greet", ServerStreams: true, ClientStreams: true, Handler: func(srv any, ss grpc.ServerStream) error {
			s := srv.(*stock)
			s.calls.Add(1)
			err := ss.SendMsg(wrapperspb.String("hello " + seen(ss.Context()).GetValue()))
			select {
			case s.greeted <- err:
			default:
			}
			return answer(ss)
		}},
	},
}

// answer answers each message received on ss with its context's key and
// token, until the client closes its side.
func answer(ss grpc.ServerStream) error {
	for {
		in := new(wrapperspb.StringValue)
		if err := ss.RecvMsg(in); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := ss.SendMsg(seen(ss.Context())); err != nil {
			return err
		}
	}
}

func echo(_ context.Context, req any) (any, error) { return req, nil }

// skuKey is the test's Options.Resource: "sku:" and the request's value
// for unary calls, "feed" for the streams (a stream's key comes from its
// method).
func skuKey(_ context.Context, method string, req any) (string, error) {
	switch method {
	case methodWatch, methodFeed:
		return "feed", nil
	}
	v, ok := req.(*wrapperspb.StringValue)
	if !ok {
		return "", errors.New("not a StringValue")
	}
	if v.GetValue() == "" {
		return "", errors.New("no SKU")
	}
	return "sku:" + v.GetValue(), nil
}

// testOptions are the options most tests use: Take and the streams
// require a token, Read does not, Ping is not fenced.
func testOptions(fence token.Fence) grpcmw.Options {
	return grpcmw.Options{
		Resource: skuKey,
		Fence:    fence,
		Fenced:   func(m string) bool { return m != methodPing },
		Require:  func(m string) bool { return m != methodRead },
	}
}

// server is a running test server on a loopback TCP port.
type server struct {
	ic    *grpcmw.Interceptor // nil for a bare server
	stock *stock
	addr  string
	conn  *grpc.ClientConn // a plain client, no interceptor
}

// startServer serves the Stock service behind an Interceptor made from o,
// on a free loopback port, until the test ends.
func startServer(t testing.TB, o grpcmw.Options) *server {
	t.Helper()
	ic, err := grpcmw.New(o)
	if err != nil {
		t.Fatal(err)
	}
	s := startGRPC(t, grpc.ChainUnaryInterceptor(ic.UnaryServerInterceptor()), grpc.ChainStreamInterceptor(ic.StreamServerInterceptor()))
	s.ic = ic
	return s
}

// startGRPC serves the Stock service with the given server options.
func startGRPC(t testing.TB, opts ...grpc.ServerOption) *server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{stock: &stock{greeted: make(chan error, 16)}, addr: lis.Addr().String()}
	gs := grpc.NewServer(opts...)
	gs.RegisterService(&stockDesc, s.stock)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-done
	})
	s.conn = dial(t, s.addr)
	return s
}

// dial returns a client connection to addr, closed when the test ends.
func dial(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// call makes a unary call of method with the request value v on conn.
func call(ctx context.Context, conn *grpc.ClientConn, method, v string) (string, error) {
	out := new(wrapperspb.StringValue)
	err := conn.Invoke(ctx, method, wrapperspb.String(v), out)
	return out.GetValue(), err
}

// errorInfo returns the fenceguard ErrorInfo of err's status, or nil.
func errorInfo(err error) *errdetails.ErrorInfo {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == grpcmw.Domain {
			return ei
		}
	}
	return nil
}

// wantRefusal fails t unless err is a refusal with code and reason.
func wantRefusal(t *testing.T, err error, code codes.Code, reason string) *errdetails.ErrorInfo {
	t.Helper()
	if got := status.Code(err); got != code {
		t.Fatalf("code = %v (%v), want %v", got, err, code)
	}
	ei := errorInfo(err)
	if ei == nil {
		t.Fatalf("%v: no ErrorInfo of domain %q", err, grpcmw.Domain)
	}
	if ei.GetReason() != reason {
		t.Fatalf("reason = %q, want %q", ei.GetReason(), reason)
	}
	return ei
}

// truncate cuts s for a test's message.
func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return strings.ToValidUTF8(s, "?")
}

// codeOf is status.Code.
func codeOf(err error) codes.Code { return status.Code(err) }
