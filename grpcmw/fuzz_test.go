package grpcmw_test

import (
	"context"
	"errors"
	"io"
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

// memStream is a grpc.ServerStream in memory: RecvMsg hands out its
// messages, then io.EOF; SendMsg records what the handler sends.
type memStream struct {
	ctx  context.Context
	in   []string
	sent []string
}

func (s *memStream) SetHeader(metadata.MD) error  { return nil }
func (s *memStream) SendHeader(metadata.MD) error { return nil }
func (s *memStream) SetTrailer(metadata.MD)       {}
func (s *memStream) Context() context.Context     { return s.ctx }

func (s *memStream) SendMsg(m any) error {
	s.sent = append(s.sent, m.(*wrapperspb.StringValue).GetValue())
	return nil
}

func (s *memStream) RecvMsg(m any) error {
	if len(s.in) == 0 {
		return io.EOF
	}
	m.(*wrapperspb.StringValue).Value = s.in[0]
	s.in = s.in[1:]
	return nil
}

// The flags of FuzzStreamInterceptor's input.
const (
	fuzzFirstMessage = 1 << iota // the method takes its key from its first message
	fuzzEachMessage              // Options.CheckEachMessage
	fuzzSerialize                // Options.SerializePerKey
	fuzzSendFirst                // the handler sends before it receives
	fuzzIgnoreErrors             // the handler goes on after an error
	fuzzOptional                 // the method does not require a token
	fuzzFenceFails               // the Fence fails every claim after its first
)

// forgedAbove is FuzzStreamInterceptor's Check: a token above it is forged.
const forgedAbove = token.Token(1) << 60

// FuzzStreamInterceptor drives the stream interceptor with any metadata,
// any messages and handlers that misbehave, with and without
// KeyFromFirstMessage, CheckEachMessage and SerializePerKey. It never
// panics; every error the handler or the client sees from the fencing
// layer is one of its documented refusals (the code and ErrorInfo of
// doc.go, or the FAILED_PRECONDITION of a send before the first message);
// every refusal is observed; a mark moves only to the token of a claim
// the Fence accepted, never below where it was; no message leaves a
// stream carrying a token before its claim; and no per-key mutex is left
// held. The stream is in memory, so that the metadata reaches the
// interceptor as it is; TestHostileMetadata sends such metadata through a
// real server.
//
//	go test -run '^$' -fuzz FuzzStreamInterceptor -fuzztime 60s -fuzzminimizetime 2s ./grpcmw/
func FuzzStreamInterceptor(f *testing.F) {
	for _, seed := range []struct {
		first, second string
		values        uint8
		binary        bool
		m1, m2        string
		flags         uint8
		mark          uint64
	}{
		{"7", "", 1, false, "1", "2", 0, 0},
		{"7", "", 1 + 2*4, false, "1", "2", fuzzFirstMessage, 0},
		{"7", "", 1 + 2*4, false, "1", "2", fuzzFirstMessage | fuzzSendFirst, 0},
		{"7", "", 1 + 2*4, false, "", "2", fuzzFirstMessage | fuzzIgnoreErrors | fuzzSendFirst, 0},
		{"7", "", 1 + 2*4, false, "1", "1", fuzzEachMessage | fuzzFenceFails, 0},
		{"7", "", 1 + 2*4, false, "1", "1", fuzzFirstMessage | fuzzEachMessage | fuzzSerialize, 8},
		{"7", "", 1 + 1*4, false, "1", "", fuzzSerialize, 9},
		{"7", "8", 2 + 1*4, false, "1", "", fuzzFirstMessage, 0},
		{"7", "", 1 + 1*4, true, "1", "", fuzzFirstMessage, 0},
		{"", "", 0 + 2*4, false, "1", "2", fuzzFirstMessage | fuzzOptional | fuzzSendFirst, 0},
		{"1152921504606846977", "", 1 + 1*4, false, "1", "", fuzzFirstMessage, 0},
		{"7", "", 1 + 2*4, false, "a\x00b", "\xff", fuzzFirstMessage | fuzzIgnoreErrors, 0},
		{"7", "", 1 + 1*4, false, strings.Repeat("x", 600), "", fuzzFirstMessage, 0},
		{"\u0667", "7", 3 + 1*4, false, "\u202e", "", fuzzFirstMessage, 0},
	} {
		f.Add(seed.first, seed.second, seed.values, seed.binary, seed.m1, seed.m2, seed.flags, seed.mark)
	}
	resource := func(ctx context.Context, method string, req any) (string, error) {
		if req == nil {
			if method == methodFeed {
				return "feed", nil
			}
			return "", errors.New("a Watch's key comes from its first message")
		}
		return skuKey(ctx, methodTake, req)
	}
	check := token.CheckFunc(func(_ context.Context, key string, t token.Token) error {
		if t > forgedAbove {
			return &token.ForgedError{Resource: key, Presented: t, Bound: forgedAbove}
		}
		return nil
	})
	f.Fuzz(func(t *testing.T, first, second string, values uint8, binary bool, m1, m2 string, flags uint8, mark uint64) {
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
		msgs := []string{m1, m2}[:int(values/4)%3]
		method := methodFeed
		if flags&fuzzFirstMessage != 0 {
			method = methodWatch
		}
		mem := &token.MemoryFence{Check: token.NoCheck()}
		var fence token.Fence = mem
		if flags&fuzzFenceFails != 0 {
			claims := 0
			fence = fenceFunc(func(ctx context.Context, key string, tok token.Token) error {
				if claims++; claims > 1 {
					return errors.New("the fence is down")
				}
				return mem.Claim(ctx, key, tok)
			})
		}
		// The keys the call can touch, and their marks before it.
		keys := map[string]token.Token{"feed": 0}
		for _, m := range msgs {
			if k, err := resource(context.Background(), methodTake, wrapperspb.String(m)); err == nil {
				keys[k] = 0
			}
		}
		for k := range keys {
			if mark != 0 {
				if err := mem.Claim(context.Background(), k, token.Token(mark)); err != nil {
					t.Fatal(err)
				}
			}
			keys[k] = mem.HighWater(k)
		}

		var outcomes []grpcmw.Outcome
		ic, err := grpcmw.New(grpcmw.Options{
			Resource:            resource,
			Fence:               fence,
			Check:               check,
			Require:             func(string) bool { return flags&fuzzOptional == 0 },
			SerializePerKey:     flags&fuzzSerialize != 0,
			KeyFromFirstMessage: func(m string) bool { return m == methodWatch },
			CheckEachMessage:    flags&fuzzEachMessage != 0,
			Observe: func(_ context.Context, _ string, o grpcmw.Outcome) {
				outcomes = append(outcomes, o)
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		// accepted reports whether an accepted claim has been observed.
		accepted := func() (grpcmw.Outcome, bool) {
			for _, o := range outcomes {
				if o.Result == grpcmw.ResultAccepted {
					return o, true
				}
			}
			return grpcmw.Outcome{}, false
		}
		refusals := 0 // refusals seen, to match against Observe's
		wantRefusal := func(err error, where string) {
			if errors.Is(err, grpcmw.ErrNotClaimed) {
				if flags&fuzzFirstMessage == 0 {
					t.Fatalf("%s: %v on a stream keyed by its method", where, err)
				}
				return
			}
			refusals++
			switch codeOf(err) {
			case codes.FailedPrecondition, codes.InvalidArgument, codes.PermissionDenied, codes.Aborted, codes.Unavailable:
			default:
				t.Fatalf("%s: %v is not a documented refusal", where, err)
			}
			if errorInfo(err) == nil {
				t.Fatalf("%s: refusal %v without its ErrorInfo", where, err)
			}
		}

		mem0 := &memStream{ctx: metadata.NewIncomingContext(context.Background(), md), in: msgs}
		ran := false
		var sentBy []string // per message sent: the context's key=token at the time, or "-"
		handler := func(_ any, ss grpc.ServerStream) error {
			ran = true
			send := func() error {
				v := seen(ss.Context()).GetValue()
				err := ss.SendMsg(wrapperspb.String(v))
				if err == nil {
					sentBy = append(sentBy, v)
				}
				return err
			}
			if flags&fuzzSendFirst != 0 {
				if err := send(); err != nil {
					wantRefusal(err, "SendMsg before the first message")
					if flags&fuzzIgnoreErrors == 0 {
						return err
					}
				}
			}
			for {
				err := ss.RecvMsg(new(wrapperspb.StringValue))
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err == nil {
					err = send()
				}
				if err != nil {
					wantRefusal(err, "RecvMsg")
					if flags&fuzzIgnoreErrors == 0 {
						return err
					}
				}
			}
		}
		err = ic.StreamServerInterceptor()(nil, mem0, &grpc.StreamServerInfo{FullMethod: method, IsClientStream: true, IsServerStream: true}, handler)
		if err != nil && !ran {
			wantRefusal(err, "the interceptor")
		}

		n := 0
		for _, o := range outcomes {
			if o.Result != grpcmw.ResultAccepted && o.Result != grpcmw.ResultUnfenced {
				n++
			}
		}
		if n != refusals {
			t.Fatalf("%d refusals seen, %d observed: %+v", refusals, n, outcomes)
		}
		vals, bin := md.Get(grpcmw.MetadataKey), md.Get(grpcmw.MetadataKey+"-bin")
		acc, ok := accepted()
		if ok {
			want, perr := token.Parse(first)
			switch {
			case len(vals) != 1 || len(bin) != 0 || perr != nil:
				t.Fatalf("accepted metadata %q (binary %q)", vals, bin)
			case acc.Token != want:
				t.Fatalf("accepted %d, sent %d", acc.Token, want)
			case acc.Token < keys[acc.Resource]:
				t.Fatalf("accepted %d below the mark %d of %q", acc.Token, keys[acc.Resource], acc.Resource)
			}
		}
		for k, before := range keys {
			after := mem.HighWater(k)
			if after == before {
				continue
			}
			moved := false
			for _, o := range outcomes {
				moved = moved || o.Result == grpcmw.ResultAccepted && o.Resource == k && o.Token == after
			}
			if !moved {
				t.Fatalf("the mark of %q moved from %d to %d without an accepted claim: %+v", k, before, after, outcomes)
			}
		}
		unfenced := len(outcomes) > 0 && outcomes[0].Result == grpcmw.ResultUnfenced
		for _, v := range sentBy {
			switch {
			case v == "-" && !unfenced:
				t.Fatalf("a message left a stream with a token before its claim (outcomes %+v)", outcomes)
			case v != "-" && (!ok || v != acc.Resource+"="+acc.Token.String()):
				t.Fatalf("a message left under %q, accepted %+v", v, acc)
			}
		}
		if len(mem0.sent) != len(sentBy) {
			t.Fatalf("%d messages went out, the handler sent %d", len(mem0.sent), len(sentBy))
		}
		if flags&fuzzSerialize != 0 {
			if n := grpcmw.KeysHeld(ic); n != 0 {
				t.Fatalf("%d keys still held after the stream", n)
			}
		}
	})
}
