package grpcmw_test

import (
	"context"
	"errors"
	"io"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fenceguard/fenceguard/grpcmw"
	"github.com/fenceguard/fenceguard/token"
)

// feed opens the Feed stream on conn.
func feed(t *testing.T, ctx context.Context, conn *grpc.ClientConn) grpc.ClientStream {
	t.Helper()
	st, err := conn.NewStream(ctx, &stockDesc.Streams[1], methodFeed)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// exchange sends one message on st and returns the answer. A stream the
// server refused at once may fail SendMsg with io.EOF; its status is then
// what RecvMsg returns, as grpc-go documents.
func exchange(st grpc.ClientStream) (string, error) {
	if err := st.SendMsg(wrapperspb.String("x")); err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	out := new(wrapperspb.StringValue)
	err := st.RecvMsg(out)
	return out.GetValue(), err
}

// A stream claims its key once, at its start: refused there, the handler
// never runs; accepted, its context carries key and token.
func TestStreamClaimsAtStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fence := &token.MemoryFence{}
	if err := fence.Claim(ctx, "feed", 10); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, testOptions(fence))

	_, err := exchange(feed(t, ctx, s.conn))
	wantRefusal(t, err, codes.FailedPrecondition, grpcmw.ReasonMissing)
	_, err = exchange(feed(t, withToken(ctx, "9"), s.conn))
	ei := wantRefusal(t, err, codes.Aborted, grpcmw.ReasonStale)
	if ei.GetMetadata()["current"] != "10" || ei.GetMetadata()["resource"] != "feed" {
		t.Errorf("stale metadata = %v", ei.GetMetadata())
	}
	_, err = exchange(feed(t, withToken(ctx, "10", "10"), s.conn))
	wantRefusal(t, err, codes.InvalidArgument, grpcmw.ReasonInvalid)
	_, err = exchange(feed(t, metadata.AppendToOutgoingContext(ctx, grpcmw.MetadataKey+"-bin", "10"), s.conn))
	wantRefusal(t, err, codes.InvalidArgument, grpcmw.ReasonInvalid)
	if n := s.stock.calls.Load(); n != 0 {
		t.Fatalf("the handler ran %d times on refusals", n)
	}
	if hw := fence.HighWater("feed"); hw != 10 {
		t.Fatalf("mark = %d after refusals, want 10", hw)
	}
	if got, err := exchange(feed(t, withToken(ctx, "10"), s.conn)); err != nil || got != "feed=10" {
		t.Fatalf("Feed with 10 = %q, %v", got, err)
	}
}

// By default, a newer holder's claim does not cut off a stream already
// open: it goes on under the token it was opened with. With
// CheckEachMessage, its next message is refused as stale.
func TestLongLivedStream(t *testing.T) {
	for _, each := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		fence := &token.MemoryFence{}
		o := testOptions(fence)
		o.CheckEachMessage = each
		s := startServer(t, o)
		client := clientConn(t, s, &grpcmw.Client{Key: clientKey})
		st := feed(t, token.NewContext(ctx, "feed", 10), client)
		if got, err := exchange(st); err != nil || got != "feed=10" {
			t.Fatalf("first message = %q, %v", got, err)
		}
		if err := fence.Claim(ctx, "feed", 11); err != nil { // a newer holder
			t.Fatal(err)
		}
		got, err := exchange(st)
		if !each {
			if err != nil || got != "feed=10" {
				t.Errorf("without CheckEachMessage, after a newer claim: %q, %v; want the stream to go on", got, err)
			}
		} else {
			var se *token.StaleError
			if !errors.As(err, &se) || se.Current != 11 || se.Presented != 10 || se.Resource != "feed" {
				t.Errorf("with CheckEachMessage, after a newer claim: %q, %v; want a StaleError at 11", got, err)
			}
		}
		cancel()
	}
}

// watch opens the Watch stream on conn, sends its request and returns
// the one answer.
func watch(t *testing.T, ctx context.Context, conn *grpc.ClientConn, sku string) (string, error) {
	t.Helper()
	st, err := conn.NewStream(ctx, &stockDesc.Streams[0], methodWatch)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(wrapperspb.String(sku)); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err) // io.EOF: refused at once; RecvMsg has the status
	}
	_ = st.CloseSend()
	out := new(wrapperspb.StringValue)
	err = st.RecvMsg(out)
	return out.GetValue(), err
}

// With KeyFromFirstMessage, a stream's key comes from the message the
// handler receives first, claimed before RecvMsg returns it: the handler
// then finds key and token in the stream's context; a refusal is what
// RecvMsg returns, nothing is sent, and no mark moves.
func TestStreamKeyFromFirstMessage(t *testing.T) {
	ctx := context.Background()
	fence := &token.MemoryFence{}
	if err := fence.Claim(ctx, "sku:1", 10); err != nil {
		t.Fatal(err)
	}
	o := testOptions(fence)
	o.Resource = func(ctx context.Context, method string, req any) (string, error) {
		if method == methodWatch && req == nil {
			return "", errors.New("a Watch's key comes from its request")
		}
		return skuKey(ctx, methodTake, req)
	}
	o.KeyFromFirstMessage = func(m string) bool { return m == methodWatch }
	s := startServer(t, o)

	if got, err := watch(t, withToken(ctx, "10"), s.conn, "1"); err != nil || got != "sku:1=10" {
		t.Fatalf("Watch(1) with 10 = %q, %v", got, err)
	}
	_, err := watch(t, withToken(ctx, "9"), s.conn, "1")
	ei := wantRefusal(t, err, codes.Aborted, grpcmw.ReasonStale)
	if ei.GetMetadata()["current"] != "10" || ei.GetMetadata()["resource"] != "sku:1" {
		t.Errorf("stale metadata = %v", ei.GetMetadata())
	}
	_, err = watch(t, withToken(ctx, "9"), s.conn, "")
	wantRefusal(t, err, codes.InvalidArgument, grpcmw.ReasonNoResource)
	calls := s.stock.calls.Load()
	_, err = watch(t, ctx, s.conn, "1")
	wantRefusal(t, err, codes.FailedPrecondition, grpcmw.ReasonMissing)
	if s.stock.calls.Load() != calls {
		t.Error("a stream without a token reached its handler")
	}
	if hw := fence.HighWater("sku:1"); hw != 10 {
		t.Errorf("mark = %d after refusals, want 10", hw)
	}
	if got, err := watch(t, withToken(ctx, "11"), s.conn, "2"); err != nil || got != "sku:2=11" {
		t.Fatalf("Watch(2) with 11 = %q, %v", got, err)
	}
}

// greet opens the Greet stream on conn, sends sku, closes its side and
// returns every message the server sent and the stream's status.
func greet(t *testing.T, ctx context.Context, conn *grpc.ClientConn, sku string) ([]string, error) {
	t.Helper()
	st, err := conn.NewStream(ctx, &stockDesc.Streams[2], methodGreet)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(wrapperspb.String(sku)); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err) // io.EOF: the stream ended; RecvMsg has the status
	}
	_ = st.CloseSend()
	var got []string
	for {
		out := new(wrapperspb.StringValue)
		if err := st.RecvMsg(out); err != nil {
			if errors.Is(err, io.EOF) {
				return got, nil
			}
			return got, err
		}
		got = append(got, out.GetValue())
	}
}

// With KeyFromFirstMessage, a handler that sends before it receives the
// first message sends nothing: the stream's key, and so its claim, are not
// known yet, and the message would go out unfenced. SendMsg fails with
// FAILED_PRECONDITION (no ErrorInfo: it is the handler's mistake, not a
// verdict on the token); once the first message is received and claimed,
// the stream sends as usual. A refused first message leaves the greeting
// refused too, and the client receives nothing but the refusal.
func TestStreamSendBeforeFirstMessage(t *testing.T) {
	ctx := context.Background()
	fence := &token.MemoryFence{}
	if err := fence.Claim(ctx, "sku:1", 5); err != nil {
		t.Fatal(err)
	}
	o := testOptions(fence)
	o.Resource = func(ctx context.Context, method string, req any) (string, error) {
		if req == nil {
			return "", errors.New("a Greet's key comes from its first message")
		}
		return skuKey(ctx, methodTake, req)
	}
	o.KeyFromFirstMessage = func(m string) bool { return m == methodGreet }
	s := startServer(t, o)
	greeting := func() error {
		t.Helper()
		select {
		case err := <-s.stock.greeted:
			return err
		default:
			t.Fatal("the handler did not greet")
			return nil
		}
	}

	got, err := greet(t, withToken(ctx, "10"), s.conn, "1")
	if err != nil || len(got) != 1 || got[0] != "sku:1=10" {
		t.Fatalf("Greet(1) with 10 = %q, %v; want only the answer to its message, no greeting", got, err)
	}
	if err := greeting(); codeOf(err) != codes.FailedPrecondition || errorInfo(err) != nil {
		t.Errorf("the greeting's SendMsg = %v; want FAILED_PRECONDITION without ErrorInfo", err)
	}
	if hw := fence.HighWater("sku:1"); hw != 10 {
		t.Errorf("mark = %d, want 10", hw)
	}

	got, err = greet(t, withToken(ctx, "9"), s.conn, "1")
	wantRefusal(t, err, codes.Aborted, grpcmw.ReasonStale)
	if len(got) != 0 {
		t.Errorf("a stale stream received %q", got)
	}
	if err := greeting(); codeOf(err) != codes.FailedPrecondition {
		t.Errorf("the stale stream's greeting = %v; want FAILED_PRECONDITION", err)
	}
	if hw := fence.HighWater("sku:1"); hw != 10 {
		t.Errorf("mark = %d after a stale stream, want 10", hw)
	}

	// The same handler on a stream keyed by its method greets: the
	// refusal above is the defence, not the handler failing to send.
	o.Resource = func(ctx context.Context, method string, req any) (string, error) { return "greet", nil }
	o.KeyFromFirstMessage = nil
	s = startServer(t, o)
	got, err = greet(t, withToken(ctx, "10"), s.conn, "1")
	if err != nil || len(got) != 2 || got[0] != "hello greet=10" || got[1] != "greet=10" {
		t.Fatalf("Greet keyed by its method = %q, %v; want the greeting and the answer", got, err)
	}
}
