package grpcmw

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fenceguard/fenceguard/token"
)

// ErrNoKey is what a [Client]'s interceptors return, wrapped, for a call
// whose context carries a token when the Client has no [Client.Key]:
// without knowing which resource a call is for, the Client cannot tell
// whether the token was granted for it, and does not guess.
var ErrNoKey = errors.New("grpcmw: Client.Key is nil: cannot tell whether the context's token is for this call's resource")

// ErrUnavailable is what a [ReasonUnavailable] refusal unwraps to on the
// client: the server could not check the token, and did nothing.
var ErrUnavailable = errors.New("grpcmw: the fencing check was unavailable")

// ErrKeyMismatch is what a [ReasonKeyMismatch] answer unwraps to on the
// client: the server's handler asked its store about another resource
// than the one the token was accepted for — a bug of the server.
var ErrKeyMismatch = errors.New("grpcmw: the server accessed another resource than the call's")

// Client is the client side: it sends the fencing token of the lease in
// a call's context to the resource it was granted for — and to nothing
// else — and returns the server's refusals as errors that match
// package token's: a stale token as a [*token.StaleError], and so on.
//
//	c := &grpcmw.Client{Key: func(method string, req any) (string, bool) {
//		if r, ok := req.(*pb.DebitRequest); ok {
//			return "account:" + strconv.FormatInt(r.Account, 10), true
//		}
//		return "", false
//	}}
//	conn, err := grpc.NewClient(addr, grpc.WithChainUnaryInterceptor(c.UnaryClientInterceptor()), …)
//	err = g.Do(ctx, "account:7", func(ctx context.Context, _ token.Token) error {
//		_, err := client.Debit(ctx, &pb.DebitRequest{Account: 7}) // carries x-fencing-token
//		return err
//	})
//
// # Calls
//
// When the call's context carries a token ([token.FromContext]: a guard
// lease's context, or the function context of guard.Do or guard.DoAll),
// the Client asks [Client.Key] which lock key guards the call's resource:
//
//   - a key the context holds ([token.Lookup]): the call goes with that
//     key's token in the [MetadataKey] metadata;
//   - another key, or none: the call goes without the token — a fenced
//     method then refuses it as it refuses any tokenless call;
//   - Key nil: the call is refused with an error wrapping [ErrNoKey] and
//     nothing is sent.
//
// A [MetadataKey] value the caller put in the outgoing metadata itself is
// sent as it is, whatever Key says. Without a token in the context the
// call goes out unchanged and Key is not asked.
//
// # Refusals
//
// An error whose status carries an [errdetails.ErrorInfo] of [Domain] is
// the fencing layer's answer, not the application's: it comes back as a
// [*Refusal] whose Err is the typed error the reason stands for, so that
// errors.Is and errors.As see it, and whose GRPCStatus is the server's
// status, so that status.Code and status.FromError still do:
//
//   - [ReasonStale], to a call that carried a token: a [*token.StaleError]
//     (Resource, Presented, and Current, the resource's high-water when
//     the server said). The lock is lost; nothing was done.
//   - [ReasonForged], to a call that carried a token: a
//     [*token.ForgedError] with the Bound it exceeded.
//   - [ReasonMissing]: [token.ErrMissing]; [ReasonInvalid]:
//     [token.ErrInvalid]; [ReasonNoResource]: [token.ErrNotFound];
//     [ReasonCondition]: [token.ErrCondition]; [ReasonKeyMismatch]:
//     [ErrKeyMismatch]; [ReasonUnavailable]: [ErrUnavailable].
//
// A reason counts only under the status code the server sends it with
// (ABORTED for a stale token, and so on), and a stale or forged verdict
// only for a call that carried a token and whose metadata does not
// contradict it (the token presented, a mark above it, a bound below it).
// Every other error is returned untouched. A call refused as missing while
// the context holds the token of another key says so in its message.
//
// The zero Client sends no token (it refuses calls that carry one) and is
// safe for concurrent use, as is any Client whose Key is.
type Client struct {
	// Key maps a call — its full method and its request message (nil for
	// a stream, whose messages are not known when it opens) — to the key
	// of the lock that guards the resource it is for, and reports false
	// for a call that is for no fenced resource. It must derive the key
	// the way the server's [Options.Resource] does. For a stream keyed by
	// its first message (the server's [Options.KeyFromFirstMessage]) it
	// sees no message: report the key of the lock held around the stream
	// for that method, or the stream goes out without a token.
	//
	// A refusal's [*token.StaleError] names the resource as the server's
	// store does (storage/postgres: its table's name for the row), which
	// need not be this key.
	Key func(method string, req any) (key string, ok bool)
}

// UnaryClientInterceptor returns the Client's interceptor for unary
// calls, for [grpc.WithChainUnaryInterceptor].
func (c *Client) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ctx, sent, key, err := c.outgoing(ctx, method, req)
		if err != nil {
			return err
		}
		return refused(ctx, invoker(ctx, method, req, reply, cc, opts...), sent, key)
	}
}

// StreamClientInterceptor returns the Client's interceptor for streams,
// for [grpc.WithChainStreamInterceptor]. Key is asked with a nil
// request; the refusal of a stream comes from its RecvMsg.
func (c *Client) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		ctx, sent, key, err := c.outgoing(ctx, method, nil)
		if err != nil {
			return nil, err
		}
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, refused(ctx, err, sent, key)
		}
		return &clientStream{ClientStream: cs, sent: sent, key: key}, nil
	}
}

type clientStream struct {
	grpc.ClientStream
	sent token.Token
	key  string
}

func (s *clientStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil || errors.Is(err, io.EOF) {
		return err
	}
	return refused(s.Context(), err, s.sent, s.key)
}

func (s *clientStream) Header() (metadata.MD, error) {
	md, err := s.ClientStream.Header()
	if err != nil {
		err = refused(s.Context(), err, s.sent, s.key)
	}
	return md, err
}

// outgoing returns ctx with the token the call is to carry, the token and
// the key it was sent for. The caller's own metadata is read only when
// the context carries a token: otherwise the call goes out as it is, and
// what it carried is read if it is refused ([ownToken]).
func (c *Client) outgoing(ctx context.Context, method string, req any) (context.Context, token.Token, string, error) {
	lockKey, tok, ok := token.FromContext(ctx)
	if !ok || tok.IsZero() {
		return ctx, 0, "", nil
	}
	if own, ok := ownToken(ctx); ok {
		return ctx, own, "", nil // the caller's own: sent as it is
	}
	if c.Key == nil {
		return ctx, 0, "", fmt.Errorf("%w (the context carries the token of %q)", ErrNoKey, lockKey)
	}
	key, ok := c.Key(method, req)
	if !ok {
		return ctx, 0, "", nil
	}
	t, held := token.Lookup(ctx, key)
	if !held {
		return ctx, 0, key, nil // sent nothing; key names the call in a refusal
	}
	return metadata.AppendToOutgoingContext(ctx, MetadataKey, t.String()), t, key, nil
}

// ownToken returns the token the caller put in the outgoing metadata
// itself (0 when it is not one valid value), and whether it put any.
func ownToken(ctx context.Context) (token.Token, bool) {
	md, ok := metadata.FromOutgoingContext(ctx)
	if !ok {
		return 0, false
	}
	vals := md.Get(MetadataKey)
	if len(vals) == 0 {
		return 0, false
	}
	var t token.Token
	if len(vals) == 1 {
		t, _ = token.Parse(vals[0])
	}
	return t, true
}

// refused is fromStatus for a call's error, with the token the call
// carried.
func refused(ctx context.Context, err error, sent token.Token, key string) error {
	if err == nil {
		return nil
	}
	if sent == 0 {
		sent, _ = ownToken(ctx)
	}
	err = fromStatus(err, sent, key)
	var r *Refusal
	if errors.As(err, &r) && r.Reason == ReasonMissing && sent == 0 && key != "" {
		if held, _, ok := token.FromContext(ctx); ok && held != key {
			r.note = fmt.Sprintf("the call is for %q and the context holds no token for it, only for %q", key, held)
			r.Err = fmt.Errorf("%w: %s", token.ErrMissing, r.note)
		}
	}
	return err
}

// codeFits reports whether code is the one the server's [Interceptor] and
// [Error] send with reason: a status whose code contradicts its reason is
// not believed.
func codeFits(reason string, code codes.Code) bool {
	switch reason {
	case ReasonStale:
		return code == codes.Aborted
	case ReasonForged:
		return code == codes.PermissionDenied
	case ReasonMissing, ReasonCondition:
		return code == codes.FailedPrecondition
	case ReasonInvalid:
		return code == codes.InvalidArgument
	case ReasonNoResource:
		return code == codes.InvalidArgument || code == codes.NotFound
	case ReasonKeyMismatch:
		return code == codes.Internal
	case ReasonUnavailable:
		return code == codes.Unavailable
	}
	return false
}

// Refusal is the error a [Client] returns for an answer of the fencing
// layer: a refusal of the server's [Interceptor], or a store's error a
// handler returned through [Error]. Err is the typed error the reason
// stands for ([Client] lists them); GRPCStatus returns the server's
// status.
type Refusal struct {
	// Code is the status code.
	Code codes.Code
	// Reason is the ErrorInfo's reason, one of the Reason constants.
	Reason string
	// Message is the status message, as the server sent it.
	Message string
	// Err is the typed error: a [*token.StaleError], [token.ErrMissing], …
	Err error

	st   *status.Status
	note string // what the client knows of the refusal beyond the server's message
}

// Error returns the code and the server's message; control and
// bidirectional-formatting characters in the message are shown as U+FFFD,
// so that they cannot forge lines or colours in a log.
func (r *Refusal) Error() string {
	if r == nil {
		return "grpcmw: <nil> *Refusal"
	}
	msg := "grpcmw: " + r.Code.String() + ": " + printable(r.Message)
	if r.note != "" {
		msg += " (" + printable(r.note) + ")"
	}
	return msg
}

// Unwrap returns Err.
func (r *Refusal) Unwrap() error { return r.Err }

// GRPCStatus returns the server's status, for status.FromError and
// status.Code.
func (r *Refusal) GRPCStatus() *status.Status { return r.st }

// fromStatus returns err as a *Refusal when its status is one of the
// fencing layer's, err otherwise. sent is the token the call carried (0:
// none), key the resource key it was sent for.
func fromStatus(err error, sent token.Token, key string) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() == codes.OK {
		return err
	}
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == Domain {
			info = ei
			break
		}
	}
	if info == nil || !codeFits(info.GetReason(), st.Code()) {
		return err
	}
	md := info.GetMetadata()
	tok := func(name string) (token.Token, bool, bool) { // value, present, valid
		v, present := md[name]
		if !present {
			return 0, false, false
		}
		t, err := token.Parse(v)
		return t, true, err == nil
	}
	presented, pHas, pOK := tok(metaPresented)
	current, cHas, cOK := tok(metaCurrent)
	bound, bHas, bOK := tok(metaBound)
	resource := md[metaResource]
	r := &Refusal{Code: st.Code(), Reason: info.GetReason(), Message: st.Message(), st: st}
	switch r.Reason {
	case ReasonStale, ReasonForged:
		// A verdict on the token sent: on a token the call did not carry,
		// on another token, naming a resource no server would echo, or
		// contradicting itself, it is none.
		switch {
		case sent == 0,
			pHas && (!pOK || presented != sent),
			resource != "" && echoKey(resource) == "",
			r.Reason == ReasonStale && cHas && (!cOK || current <= sent),
			r.Reason == ReasonForged && bHas && (!bOK || bound >= sent):
			return err
		}
		if resource == "" {
			resource = key
		}
	}
	switch r.Reason {
	case ReasonStale:
		r.Err = &token.StaleError{Resource: resource, Presented: sent, Current: current}
	case ReasonForged:
		r.Err = &token.ForgedError{Resource: resource, Presented: sent, Bound: bound}
	case ReasonMissing:
		r.Err = token.ErrMissing
	case ReasonInvalid:
		r.Err = token.ErrInvalid
	case ReasonNoResource:
		r.Err = token.ErrNotFound
	case ReasonCondition:
		r.Err = token.ErrCondition
	case ReasonKeyMismatch:
		r.Err = ErrKeyMismatch
	case ReasonUnavailable:
		r.Err = ErrUnavailable
	default:
		return err
	}
	return r
}

// printable returns s with every control or bidirectional-formatting
// character (and invalid UTF-8) replaced by U+FFFD.
func printable(s string) string {
	clean := func(r rune) bool {
		return r != utf8.RuneError && !unicode.IsControl(r) && !unicode.Is(unicode.Bidi_Control, r)
	}
	for _, r := range s {
		if !clean(r) {
			return strings.Map(func(r rune) rune {
				if clean(r) {
					return r
				}
				return utf8.RuneError
			}, s)
		}
	}
	return s
}
