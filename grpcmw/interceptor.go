package grpcmw

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fenceguard/fenceguard/token"
)

// MetadataKey is the metadata key that carries a token, in the wire form
// of [token.Parse]: the name of the HTTP header [token.Header], lower
// case, as gRPC metadata keys are.
const MetadataKey = "x-fencing-token"

// binaryKey is MetadataKey's binary form, which the interceptors refuse:
// a token is text, and a client sending it as bytes expects a fence that
// this one would not be.
const binaryKey = MetadataKey + "-bin"

// Options configure an [Interceptor]. Zero fields select defaults; [New]
// validates them once.
type Options struct {
	// Resource derives the resource key of a call from its full method
	// ("/pkg.Service/Method") and its request message, and is required.
	// The interceptor takes the key from nothing else: a key the client
	// names beside the request is never used — unless Resource reads one
	// from ctx, which carries the incoming metadata, and it must not. For
	// a stream it is called once, at the stream's start, with a nil
	// message: a stream's key comes from its method — or from its first
	// message, with [Options.KeyFromFirstMessage].
	//
	// It must map each resource to exactly one key, the key the store and
	// the handler use for it: two spellings of one resource would have two
	// high-water marks, and a stale holder could use the other one. An
	// error, or a key that is empty, longer than 512 bytes, not UTF-8 or
	// holds a control character, answers INVALID_ARGUMENT ([ReasonNoResource]).
	Resource func(ctx context.Context, method string, req any) (string, error)

	// Fence holds the high-water marks and is required: a
	// [*token.MemoryFence] for a resource served by one process; a shared
	// one (redislock.Fence, the storage/postgres fence) otherwise; or
	// [ClaimInStore] when the store behind the handler claims the token in
	// the same step as the access.
	Fence token.Fence

	// Fenced reports whether calls to the full method are fenced at all.
	// Calls to a method that is not pass straight through, token or not,
	// unseen by Observe. Default: every method. gRPC v1.79.3 and later
	// refuse a call whose method does not start with '/', so a method
	// has one spelling here.
	Fenced func(method string) bool

	// Require reports whether a call to a fenced method must carry a
	// token. A call that need not and does not passes through, unchecked
	// and without a token in its context; one that carries a token is
	// checked and claims like any other. Default: every fenced method
	// requires one ([RequireAll]).
	Require func(method string) bool

	// Check decides, before the claim, whether the token can have been
	// granted for the resource at all; a [*token.ForgedError] (or any
	// error wrapping [token.ErrForged]) answers PERMISSION_DENIED, any
	// other error UNAVAILABLE, and neither claims anything. It runs before
	// [Options.SerializePerKey] waits for the key. Default
	// [token.DefaultCheck]; add a [token.SequencerCheck] with etcd's and
	// ZooKeeper's tokens.
	Check token.Check

	// SerializePerKey makes fenced calls for one resource key run one at
	// a time in this process: a per-key mutex is held from before the
	// claim until the handler returns (for a stream: until the stream
	// ends), so claim and effect are atomic against every other fenced
	// call through this Interceptor. A call that ends while it waits is
	// refused UNAVAILABLE. Calls without a token are not serialized. A
	// long-lived stream holds up its key for as long as it is open.
	SerializePerKey bool

	// KeyFromFirstMessage, if not nil, reports whether a stream of the
	// full method takes its key from its first message rather than from
	// its method alone: its metadata is checked at the start as for any
	// call, but Resource is called with the first message the handler
	// receives, and the claim is made then, before RecvMsg returns it.
	// Until that claim succeeds the stream's Context carries no token
	// (so a store enforcer refuses what the handler does with it) and
	// SendMsg sends nothing and fails with FAILED_PRECONDITION (no
	// ErrorInfo: the handler's mistake, not a verdict on the token): a
	// message sent before the key is known would go out unfenced, so a
	// handler that greets first must receive first. Headers (SendHeader)
	// are not held back. A refusal is what the first RecvMsg returns. Read the
	// stream's Context after the first RecvMsg: generated server-streaming
	// handlers receive the request before calling the method, so there it
	// holds of itself.
	KeyFromFirstMessage func(method string) bool

	// CheckEachMessage makes a stream claim its key again, with the same
	// token, before each message it receives after the first claim: a
	// newer holder's claim then ends the old holder's stream at its next
	// message (RecvMsg returns the ABORTED refusal) instead of letting it
	// go on under a lost lock. Each message costs one claim.
	CheckEachMessage bool

	// Observe, if not nil, is called once for every call to a fenced
	// method, with its [Outcome] — every refusal, those made before the
	// Check and the Fence ever see the call included — before the refusal
	// is returned or the handler runs — a stream keyed by its first
	// message ([Options.KeyFromFirstMessage]) when that message arrives,
	// so one that ends before its client sends any is not observed — and
	// again for each later message of a stream that [Options.CheckEachMessage]
	// refuses. With [ClaimInStore] the store decides, so a call the
	// interceptor lets through is reported once the store has: the first
	// refusal of the token the handler answers with [Error] (stale,
	// forged, invalid, missing, unavailable), or else, when the handler
	// returns, accepted. It runs on the call's goroutine and must be quick.
	Observe func(ctx context.Context, method string, o Outcome)

	// Log, if not nil, logs refusals, rate-limited per result so that a
	// flood of bad calls cannot flood the log ([RefusalLog]). Nil logs
	// nothing: refusals are expected traffic, counted through Observe.
	Log *RefusalLog
}

// RequireAll requires a token on every fenced method. It is the default
// [Options.Require].
func RequireAll(string) bool { return true }

// Interceptor enforces fencing tokens on a gRPC server. Make one with
// [New]; the zero Interceptor is not usable. It is safe for concurrent
// use; install both its interceptors on one server, so that
// [Options.SerializePerKey] covers unary calls and streams alike.
type Interceptor struct {
	o     Options
	locks *keyLocks // nil unless SerializePerKey
}

// New returns an Interceptor for o. It fails with a descriptive error when
// a required option is missing.
func New(o Options) (*Interceptor, error) {
	switch {
	case o.Resource == nil:
		return nil, errors.New("grpcmw: Options.Resource is required")
	case o.Fence == nil:
		return nil, errors.New("grpcmw: Options.Fence is required")
	}
	if o.Fenced == nil {
		o.Fenced = func(string) bool { return true }
	}
	if o.Require == nil {
		o.Require = RequireAll
	}
	if o.Check == nil {
		o.Check = token.DefaultCheck()
	}
	i := &Interceptor{o: o}
	if o.SerializePerKey {
		i.locks = new(keyLocks)
	}
	return i, nil
}

// UnaryServerInterceptor returns the interceptor for unary calls, for
// [grpc.ChainUnaryInterceptor] or [grpc.UnaryInterceptor]: a call reaches
// its handler only with a valid token that the Check and the Fence
// accepted for the call's resource, which the handler then finds in its
// context ([token.FromContext] gives the resource key and the token) —
// or, where [Options.Require] allows, with no token at all.
func (i *Interceptor) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !i.o.Fenced(info.FullMethod) {
			return handler(ctx, req)
		}
		a, err := i.admit(ctx, info.FullMethod, req)
		if err != nil {
			return nil, err
		}
		defer a.done()
		return handler(a.ctx, req)
	}
}

// StreamServerInterceptor returns the interceptor for streams, for
// [grpc.ChainStreamInterceptor] or [grpc.StreamInterceptor]. A stream
// claims its key once, before the handler runs, with the key
// [Options.Resource] derives from the method — or, with
// [Options.KeyFromFirstMessage], when the handler receives the first
// message, from that message; the handler's stream context carries key
// and token. With [Options.CheckEachMessage] it claims again before every
// message received.
func (i *Interceptor) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		method := info.FullMethod
		if !i.o.Fenced(method) {
			return handler(srv, ss)
		}
		if i.o.KeyFromFirstMessage != nil && i.o.KeyFromFirstMessage(method) {
			t, present, err := i.token(ss.Context(), method)
			if err != nil {
				return err
			}
			if !present {
				return handler(srv, ss)
			}
			fs := &firstMessageStream{ServerStream: ss, i: i, method: method, tok: t}
			defer fs.done()
			return handler(srv, fs)
		}
		a, err := i.admit(ss.Context(), method, nil)
		if err != nil {
			return err
		}
		defer a.done()
		if a.key == "" { // unfenced: no token, none required
			return handler(srv, ss)
		}
		fs := &fencedStream{ServerStream: ss, ctx: a.ctx}
		if i.o.CheckEachMessage {
			fs.i, fs.method, fs.key, fs.tok = i, method, a.key, a.tok
		}
		return handler(srv, fs)
	}
}

// errNotClaimed is what SendMsg returns on a stream whose key comes from
// its first message before that message was received and claimed.
var errNotClaimed = status.Error(codes.FailedPrecondition, "grpcmw: the stream sent a message before it received the first one, which names its fenced resource")

// firstMessageStream claims its key when the handler receives the first
// message ([Options.KeyFromFirstMessage]). RecvMsg and SendMsg may run on
// two goroutines, so the claim is published through an atomic pointer.
type firstMessageStream struct {
	grpc.ServerStream
	i       *Interceptor
	method  string
	tok     token.Token
	claimed atomic.Pointer[admitted] // nil until the first message is claimed
}

func (s *firstMessageStream) Context() context.Context {
	if a := s.claimed.Load(); a != nil {
		return a.ctx
	}
	return s.ServerStream.Context()
}

func (s *firstMessageStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if a := s.claimed.Load(); a != nil {
		if !s.i.o.CheckEachMessage {
			return nil
		}
		if err := s.i.o.Fence.Claim(a.ctx, a.key, a.tok); err != nil {
			return s.i.refuse(a.ctx, s.method, claimRefusal(a.tok, err), a.key, a.tok)
		}
		return nil
	}
	a, err := s.i.claim(s.ServerStream.Context(), s.method, m, s.tok)
	if err != nil {
		return err
	}
	s.claimed.Store(&a)
	return nil
}

func (s *firstMessageStream) SendMsg(m any) error {
	if s.claimed.Load() == nil {
		return errNotClaimed
	}
	return s.ServerStream.SendMsg(m)
}

// done releases the per-key mutex, if the stream took it.
func (s *firstMessageStream) done() {
	if a := s.claimed.Load(); a != nil {
		a.done()
	}
}

// fencedStream hands the handler the context with key and token, and
// claims again before each message when asked to.
type fencedStream struct {
	grpc.ServerStream
	ctx    context.Context
	i      *Interceptor // nil unless CheckEachMessage
	method string
	key    string
	tok    token.Token
}

func (s *fencedStream) Context() context.Context { return s.ctx }

func (s *fencedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil || s.i == nil {
		return err
	}
	if err := s.i.o.Fence.Claim(s.ctx, s.key, s.tok); err != nil {
		return s.i.refuse(s.ctx, s.method, claimRefusal(s.tok, err), s.key, s.tok)
	}
	return nil
}

// admitted is a call the interceptor let through: ctx carries key and
// token (unless key is "", an unfenced call), and done releases the
// per-key mutex, if any.
type admitted struct {
	ctx  context.Context
	key  string
	tok  token.Token
	lock *keyLock
	rep  *storeReport // nil unless the store decides ([ClaimInStore])
}

func (a admitted) done() {
	if a.rep != nil {
		a.rep.report(a.rep.ctx, Outcome{Result: ResultAccepted, Resource: a.key, Token: a.tok}, false)
	}
	if a.lock != nil {
		a.lock.unlock()
	}
}

// storeReportKey is the context key of a call's [storeReport].
type storeReportKey struct{}

// storeReport is the one decision reported for a call whose store decides
// ([ClaimInStore]): the first refusal [Error] turns into a status, or
// the acceptance once the handler returned without one.
type storeReport struct {
	ctx      context.Context // the call's, for Observe and Log
	i        *Interceptor
	method   string
	key      string
	tok      token.Token
	reported atomic.Bool
}

func (r *storeReport) report(ctx context.Context, o Outcome, log bool) {
	if !r.reported.CompareAndSwap(false, true) {
		return
	}
	r.i.observe(ctx, r.method, o)
	if log && r.i.o.Log != nil {
		r.i.o.Log.Log(ctx, r.method, o)
	}
}

// admit decides a call to a fenced method.
func (i *Interceptor) admit(ctx context.Context, method string, req any) (admitted, error) {
	t, present, err := i.token(ctx, method)
	if err != nil || !present {
		return admitted{ctx: ctx}, err
	}
	return i.claim(ctx, method, req, t)
}

// token reads the call's token from its metadata: present false, with no
// error, for a call without one that need not carry one.
func (i *Interceptor) token(ctx context.Context, method string) (token.Token, bool, error) {
	if vals := metadata.ValueFromIncomingContext(ctx, binaryKey); vals != nil {
		return 0, false, i.refuse(ctx, method, refusalInvalid(errBinary), "", 0)
	}
	vals := metadata.ValueFromIncomingContext(ctx, MetadataKey)
	switch len(vals) {
	case 0:
		if i.o.Require(method) {
			return 0, false, i.refuse(ctx, method, refusalMissing(), "", 0)
		}
		i.observe(ctx, method, Outcome{Result: ResultUnfenced})
		return 0, false, nil
	case 1:
	default:
		return 0, false, i.refuse(ctx, method, refusalInvalid(errDuplicate), "", 0)
	}
	t, err := token.Parse(vals[0])
	if err != nil {
		return 0, false, i.refuse(ctx, method, refusalInvalid(err), "", 0)
	}
	return t, true, nil
}

// claim derives the key of a call carrying t, checks t and claims the key.
func (i *Interceptor) claim(ctx context.Context, method string, req any, t token.Token) (admitted, error) {
	key, err := i.o.Resource(ctx, method, req)
	if err == nil {
		err = checkKey(key)
	}
	if err != nil {
		return admitted{}, i.refuse(ctx, method, refusalNoResource(err), "", t)
	}
	// Before the per-key wait: a forger must not even queue for the key.
	if err := i.o.Check.Check(ctx, key, t); err != nil {
		return admitted{}, i.refuse(ctx, method, checkRefusal(t, err), key, t)
	}
	var l *keyLock
	if i.locks != nil {
		if l, err = i.locks.lock(ctx, key); err != nil {
			return admitted{}, i.refuse(ctx, method, refusalUnavailable("the call ended while waiting for the resource", err), key, t)
		}
		// The Fence and Observe are the user's code: if either panics and
		// a recovery interceptor keeps the server up, the key must not
		// stay locked for every later call.
		defer func() {
			if l != nil {
				l.unlock()
			}
		}()
	}
	if err := i.o.Fence.Claim(ctx, key, t); err != nil {
		if l != nil {
			l.unlock()
			l = nil
		}
		return admitted{}, i.refuse(ctx, method, claimRefusal(t, err), key, t)
	}
	var rep *storeReport
	if i.o.Fence == ClaimInStore && (i.o.Observe != nil || i.o.Log != nil) {
		// The store decides: Error reports its refusal, done the
		// acceptance, whichever comes first.
		rep = &storeReport{ctx: ctx, i: i, method: method, key: key, tok: t}
		ctx = context.WithValue(ctx, storeReportKey{}, rep)
	} else {
		i.observe(ctx, method, Outcome{Result: ResultAccepted, Resource: key, Token: t})
	}
	a := admitted{ctx: token.NewContext(ctx, key, t), key: key, tok: t, lock: l, rep: rep}
	l = nil // the caller's now
	return a, nil
}

// refuse reports a refusal to Observe and Log and returns its status
// error.
func (i *Interceptor) refuse(ctx context.Context, method string, r *refusal, key string, t token.Token) error {
	if i.o.Observe != nil || i.o.Log != nil {
		o := r.outcome(key, t)
		i.observe(ctx, method, o)
		if i.o.Log != nil {
			i.o.Log.Log(ctx, method, o)
		}
	}
	return r.status(key)
}

func (i *Interceptor) observe(ctx context.Context, method string, o Outcome) {
	if i.o.Observe != nil {
		i.o.Observe(ctx, method, o)
	}
}

var (
	errDuplicate = fmt.Errorf("%w: more than one %s value", token.ErrInvalid, MetadataKey)
	errBinary    = fmt.Errorf("%w: the token sent as binary metadata (%s)", token.ErrInvalid, binaryKey)
)

// claimRefusal answers a refused claim. A stale token is a verdict; so is
// a forged one (the Fence's own check), and a token the Fence's store
// cannot hold (PostgreSQL's bigint stops at 2^63−1). Anything else means
// the check was not made, and not knowing is refusing.
func claimRefusal(t token.Token, err error) *refusal {
	var se *token.StaleError
	switch {
	case errors.As(err, &se) && se != nil:
		return refusalStale(se, err)
	case errors.Is(err, token.ErrForged):
		return refusalForged(t, err)
	case errors.Is(err, token.ErrInvalid), errors.Is(err, token.ErrRange):
		r := refusalInvalid(err)
		r.msg = "the fencing token is outside the range this resource's store accepts"
		return r
	}
	return refusalUnavailable("the fencing check could not be made", err)
}

// checkRefusal answers a refusal of [Options.Check]: forged, or not
// decided — which refuses too (fail closed).
func checkRefusal(t token.Token, err error) *refusal {
	if errors.Is(err, token.ErrForged) {
		return refusalForged(t, err)
	}
	return refusalUnavailable("the fencing token could not be checked", fmt.Errorf("grpcmw: check: %w", err))
}
