package grpcmw_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fenceguard/fenceguard/grpcmw"
	"github.com/fenceguard/fenceguard/token"
)

// clientKey is the test's Client.Key: it derives the key as skuKey does
// on the server.
func clientKey(method string, req any) (string, bool) {
	key, err := skuKey(context.Background(), method, req)
	return key, err == nil
}

// clientConn dials s through a Client's interceptors.
func clientConn(t *testing.T, s *server, c *grpcmw.Client) *grpc.ClientConn {
	t.Helper()
	return dial(t, s.addr, grpc.WithChainUnaryInterceptor(c.UnaryClientInterceptor()), grpc.WithChainStreamInterceptor(c.StreamClientInterceptor()))
}

// The Client sends the context's token only to calls whose key is the
// context's, and the handler sees it.
func TestClientSendsTokenOnlyToItsKey(t *testing.T) {
	fence := &token.MemoryFence{}
	s := startServer(t, testOptions(fence))
	conn := clientConn(t, s, &grpcmw.Client{Key: clientKey})
	ctx := token.NewContext(context.Background(), "sku:1", 42)

	if got, err := call(ctx, conn, methodTake, "1"); err != nil || got != "sku:1=42" {
		t.Fatalf("Take(1) under sku:1 = %q, %v", got, err)
	}
	// sku:2 is not the context's lock: no token, refused as missing.
	_, err := call(ctx, conn, methodTake, "2")
	if !errors.Is(err, token.ErrMissing) || status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Take(2) under sku:1 = %v, want ErrMissing", err)
	}
	if msg := err.Error(); !strings.Contains(msg, `"sku:2"`) || !strings.Contains(msg, `"sku:1"`) {
		t.Errorf("Take(2) under sku:1: %q does not say the context's token is for another key", msg)
	}
	if fence.HighWater("sku:2") != 0 {
		t.Fatal("a token of sku:1 claimed sku:2")
	}
	// A read of another key goes without the token, unfenced.
	if got, err := call(ctx, conn, methodRead, "2"); err != nil || got != "-" {
		t.Fatalf("Read(2) under sku:1 = %q, %v", got, err)
	}
	// A context over several keys sends each call its own key's token.
	multi := token.NewContext(ctx, "sku:3", 43)
	if got, err := call(multi, conn, methodTake, "1"); err != nil || got != "sku:1=42" {
		t.Fatalf("Take(1) under sku:1+sku:3 = %q, %v", got, err)
	}
	// Streams: the key from the method.
	feed := token.NewContext(context.Background(), "feed", 44)
	st, err := conn.NewStream(feed, &stockDesc.Streams[0], methodWatch)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(wrapperspb.String("x")); err != nil {
		t.Fatal(err)
	}
	_ = st.CloseSend()
	out := new(wrapperspb.StringValue)
	if err := st.RecvMsg(out); err != nil || out.GetValue() != "feed=44" {
		t.Fatalf("Watch under feed = %q, %v", out.GetValue(), err)
	}
}

// A Client without a Key refuses a call whose context carries a token,
// and sends nothing; without a token in the context, calls go out as they
// are.
func TestClientWithoutKey(t *testing.T) {
	s := startServer(t, testOptions(&token.MemoryFence{}))
	conn := clientConn(t, s, &grpcmw.Client{})
	_, err := call(token.NewContext(context.Background(), "sku:1", 42), conn, methodTake, "1")
	if !errors.Is(err, grpcmw.ErrNoKey) {
		t.Fatalf("call = %v, want ErrNoKey", err)
	}
	if n := s.stock.calls.Load(); n != 0 {
		t.Fatalf("%d calls reached the server", n)
	}
	if got, err := call(withToken(context.Background(), "7"), conn, methodTake, "1"); err != nil || got != "sku:1=7" {
		t.Fatalf("call with the caller's own metadata = %q, %v", got, err)
	}
}

// Every refusal comes back as an error that matches the token sentinel
// its reason stands for, keeps its status code, and a stale one is a
// *token.StaleError with the resource's mark.
func TestClientErrors(t *testing.T) {
	ctx := context.Background()
	now := token.Token(time.Now().UnixMicro())
	fence := &token.MemoryFence{}
	if err := fence.Claim(ctx, "sku:1", now); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, testOptions(fence))
	conn := clientConn(t, s, &grpcmw.Client{Key: clientKey})

	_, err := call(token.NewContext(ctx, "sku:1", 5), conn, methodTake, "1")
	var se *token.StaleError
	if !errors.As(err, &se) || !errors.Is(err, token.ErrStale) {
		t.Fatalf("stale = %v, want a *token.StaleError", err)
	}
	if se.Resource != "sku:1" || se.Presented != 5 || se.Current != now {
		t.Errorf("StaleError = %+v, want sku:1, 5, %d", se, now)
	}
	if status.Code(err) != codes.Aborted {
		t.Errorf("status.Code = %v, want Aborted", status.Code(err))
	}
	var r *grpcmw.Refusal
	if !errors.As(err, &r) || r.Reason != grpcmw.ReasonStale {
		t.Errorf("not a Refusal of reason STALE_TOKEN: %#v", err)
	}

	_, err = call(token.NewContext(ctx, "sku:1", math.MaxUint64), conn, methodTake, "1")
	var fe *token.ForgedError
	if !errors.As(err, &fe) || fe.Presented != math.MaxUint64 || fe.Bound == 0 || status.Code(err) != codes.PermissionDenied {
		t.Errorf("forged = %v, want a *token.ForgedError with its bound", err)
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		sku  string
		want error
	}{
		{"malformed", withToken(ctx, "05"), "1", token.ErrInvalid},
		{"missing", ctx, "1", token.ErrMissing},
		{"no resource", withToken(ctx, "5"), "", token.ErrNotFound},
	} {
		if _, err := call(tc.ctx, conn, methodTake, tc.sku); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}

	down := startServer(t, testOptions(downFence{}))
	_, err = call(token.NewContext(ctx, "sku:1", 5), clientConn(t, down, &grpcmw.Client{Key: clientKey}), methodTake, "1")
	if !errors.Is(err, grpcmw.ErrUnavailable) || status.Code(err) != codes.Unavailable {
		t.Errorf("unavailable = %v", err)
	}
}

// A store's errors that the handler returns through Error reach the
// client as the same typed errors.
func TestHandlerErrors(t *testing.T) {
	ctx := context.Background()
	fence := &token.MemoryFence{}
	s := startServer(t, testOptions(fence))
	conn := clientConn(t, s, &grpcmw.Client{Key: clientKey})
	for _, tc := range []struct {
		name   string
		err    error // what the store returned
		code   codes.Code
		want   error
		reason string
	}{
		{"stale at the store", &token.StaleError{Resource: "sku:1", Presented: 7, Current: 9}, codes.Aborted, token.ErrStale, grpcmw.ReasonStale},
		{"condition", token.ErrCondition, codes.FailedPrecondition, token.ErrCondition, grpcmw.ReasonCondition},
		{"no such row", token.ErrNotFound, codes.NotFound, token.ErrNotFound, grpcmw.ReasonNoResource},
		{"another key", token.ErrMissing, codes.Internal, grpcmw.ErrKeyMismatch, grpcmw.ReasonKeyMismatch},
		{"store down", context.DeadlineExceeded, codes.Unavailable, grpcmw.ErrUnavailable, grpcmw.ReasonUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.stock.hook = func(ctx context.Context) error { return grpcmw.Error(ctx, tc.err) }
			defer func() { s.stock.hook = nil }()
			_, err := call(token.NewContext(ctx, "sku:1", 7), conn, methodTake, "1")
			if !errors.Is(err, tc.want) || status.Code(err) != tc.code {
				t.Fatalf("err = %v (%v), want %v, %v", err, status.Code(err), tc.want, tc.code)
			}
			var r *grpcmw.Refusal
			if !errors.As(err, &r) || r.Reason != tc.reason {
				t.Fatalf("reason = %+v, want %s", r, tc.reason)
			}
		})
	}
	// An error that is not the fencing layer's goes as it is.
	own := status.Error(codes.ResourceExhausted, "out of stock")
	if got := grpcmw.Error(ctx, own); got != own {
		t.Errorf("Error(own status) = %v", got)
	}
	if grpcmw.Error(ctx, nil) != nil {
		t.Error("Error(nil) != nil")
	}
}

// A stale or forged verdict that contradicts the call — on a call that
// carried no token, another token, a mark not above it — is not a
// refusal of this call's token: the error comes back untouched.
func TestClientDistrustsContradictingVerdicts(t *testing.T) {
	ctx := context.Background()
	s := startServer(t, testOptions(&token.MemoryFence{}))
	conn := clientConn(t, s, &grpcmw.Client{Key: clientKey})
	verdict := func(reason string, md map[string]string) error {
		st, _ := status.New(codes.Aborted, "made up").WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: grpcmw.Domain, Metadata: md})
		return st.Err()
	}
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		verdict error
	}{
		{"stale naming another token", token.NewContext(ctx, "sku:1", 7), verdict(grpcmw.ReasonStale, map[string]string{"presented": "8", "current": "9"})},
		{"stale with a mark not above the token", token.NewContext(ctx, "sku:1", 7), verdict(grpcmw.ReasonStale, map[string]string{"current": "7"})},
		{"forged with a bound not below the token", token.NewContext(ctx, "sku:1", 7), verdict(grpcmw.ReasonForged, map[string]string{"bound": "9"})},
		{"stale naming a key no server echoes", token.NewContext(ctx, "sku:1", 7), verdict(grpcmw.ReasonStale, map[string]string{"resource": "a b"})},
	} {
		s.stock.hook = func(context.Context) error { return tc.verdict }
		_, err := call(tc.ctx, conn, methodTake, "1")
		if errors.Is(err, token.ErrStale) || errors.Is(err, token.ErrForged) {
			t.Errorf("%s: taken as a verdict: %v", tc.name, err)
		}
		if status.Code(err) != codes.Aborted {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	// A reason under a code the server never sends it with is no verdict.
	internal, _ := status.New(codes.Internal, "made up").WithDetails(&errdetails.ErrorInfo{Reason: grpcmw.ReasonStale, Domain: grpcmw.Domain, Metadata: map[string]string{"current": "9"}})
	s.stock.hook = func(context.Context) error { return internal.Err() }
	if _, err := call(token.NewContext(ctx, "sku:1", 7), conn, methodTake, "1"); errors.Is(err, token.ErrStale) || status.Code(err) != codes.Internal {
		t.Errorf("STALE_TOKEN under INTERNAL: %v, want the status as it is", err)
	}
	s.stock.hook = func(context.Context) error { return verdict(grpcmw.ReasonStale, map[string]string{"current": "9"}) }
	if _, err := call(ctx, conn, methodRead, "1"); errors.Is(err, token.ErrStale) {
		t.Errorf("a stale verdict to a call without a token: %v", err)
	}
	s.stock.hook = nil
}
