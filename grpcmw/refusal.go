package grpcmw

import (
	"context"
	"errors"
	"net"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fenceguard/fenceguard/token"
)

// Domain is the [errdetails.ErrorInfo] domain of every refusal: the reason
// is one of this module's.
const Domain = "github.com/fenceguard/fenceguard"

// The reasons of the refusals' [errdetails.ErrorInfo], one per outcome:
// the interceptors' refusals and what [Error] returns for a store's
// errors. Clients tell outcomes apart by reason, not by code or message.
const (
	ReasonMissing     = "MISSING_TOKEN"     // FAILED_PRECONDITION: no token on a method that requires one
	ReasonInvalid     = "INVALID_TOKEN"     // INVALID_ARGUMENT: not the wire form, two values, binary metadata, or beyond the store's range
	ReasonNoResource  = "NO_RESOURCE"       // INVALID_ARGUMENT: the call names no fenced resource; NOT_FOUND from [Error]: the store has no such resource
	ReasonForged      = "FORGED_TOKEN"      // PERMISSION_DENIED: above any token the lock can have granted
	ReasonStale       = "STALE_TOKEN"       // ABORTED: below the resource's high-water
	ReasonCondition   = "CONDITION_NOT_MET" // FAILED_PRECONDITION: the token was accepted, a condition of the access was false
	ReasonKeyMismatch = "KEY_MISMATCH"      // INTERNAL: the handler accessed another resource than the one the token was accepted for
	ReasonUnavailable = "FENCE_UNAVAILABLE" // UNAVAILABLE: the check could not be made, or the store could not be reached
)

// ErrorInfo metadata keys. Tokens are decimal strings in the wire form.
const (
	metaResource  = "resource"
	metaPresented = "presented"
	metaCurrent   = "current"
	metaBound     = "bound"
)

// refusal is one answer of the fencing layer, before it becomes a status.
type refusal struct {
	code      codes.Code
	reason    string
	msg       string
	presented token.Token
	current   token.Token
	bound     token.Token
	echoKey   bool  // name the resource key, when safe (stale)
	err       error // the cause, for Observe; never sent
}

// status returns the refusal as a status error with its ErrorInfo; key is
// the resource key, named only where the refusal is about its mark and the
// key is safe to echo.
func (r *refusal) status(key string) error {
	md := make(map[string]string, 4)
	if r.echoKey {
		if k := echoKey(key); k != "" {
			md[metaResource] = k
		}
	}
	for _, m := range [...]struct {
		name string
		t    token.Token
	}{{metaPresented, r.presented}, {metaCurrent, r.current}, {metaBound, r.bound}} {
		if !m.t.IsZero() {
			md[m.name] = strconv.FormatUint(uint64(m.t), 10)
		}
	}
	st := status.New(r.code, r.msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: r.reason, Domain: Domain, Metadata: md}); err == nil {
		st = d
	}
	return st.Err()
}

func (r *refusal) outcome(key string, t token.Token) Outcome {
	return Outcome{Result: resultOf(r.reason), Code: r.code, Resource: key, Token: t, Err: r.err}
}

func refusalMissing() *refusal {
	return &refusal{
		code:   codes.FailedPrecondition,
		reason: ReasonMissing,
		msg:    "this call must carry the " + MetadataKey + " metadata of the lock it holds",
		err:    token.ErrMissing,
	}
}

func refusalInvalid(err error) *refusal {
	msg := "the " + MetadataKey + " metadata is not one fencing token"
	var se *token.SyntaxError
	if errors.As(err, &se) && se != nil {
		// The reason is ours; the input is not echoed.
		msg += ": " + se.Reason
	}
	return &refusal{code: codes.InvalidArgument, reason: ReasonInvalid, msg: msg, err: err}
}

func refusalNoResource(err error) *refusal {
	return &refusal{
		code:   codes.InvalidArgument,
		reason: ReasonNoResource,
		msg:    "the call does not name a resource this method fences",
		err:    err,
	}
}

func refusalForged(t token.Token, err error) *refusal {
	r := &refusal{
		code:      codes.PermissionDenied,
		reason:    ReasonForged,
		msg:       "the fencing token is above any token the lock can have granted for this resource",
		presented: t,
		err:       err,
	}
	var fe *token.ForgedError
	if errors.As(err, &fe) && fe != nil {
		r.bound = fe.Bound
	}
	return r
}

func refusalStale(se *token.StaleError, err error) *refusal {
	return &refusal{
		code:      codes.Aborted,
		reason:    ReasonStale,
		msg:       "stale fencing token: a newer lock holder has claimed this resource; the lock was lost",
		presented: se.Presented,
		current:   se.Current,
		echoKey:   true,
		err:       err,
	}
}

func refusalUnavailable(msg string, err error) *refusal {
	return &refusal{
		code:   codes.Unavailable,
		reason: ReasonUnavailable,
		msg:    msg + "; the call was refused and nothing was done",
		err:    err,
	}
}

// Error returns the status error a handler answers a store enforcer's
// error with, so that a [Client] on the other side turns it back into
// the same typed error: a holder the interceptor let through can still be
// refused by the store (a newer holder claimed the row in between).
//
//   - a [*token.StaleError] (or [token.ErrStale]): ABORTED [ReasonStale],
//     with the current mark;
//   - [token.ErrForged]: PERMISSION_DENIED [ReasonForged];
//   - [token.ErrInvalid], [token.ErrRange]: INVALID_ARGUMENT [ReasonInvalid];
//   - [token.ErrNotFound]: NOT_FOUND [ReasonNoResource];
//   - [token.ErrCondition]: FAILED_PRECONDITION [ReasonCondition];
//   - [token.ErrMissing]: FAILED_PRECONDITION [ReasonMissing] — or, when
//     ctx carries a token, INTERNAL [ReasonKeyMismatch]: the handler asked
//     the store about another lock's key than the call's;
//   - an error that says the store could not be reached (a [net.Error], an
//     ended context): UNAVAILABLE [ReasonUnavailable].
//
// Any other error, nil and status errors included, is returned as it is.
// The message never carries the cause, and only the refusals of the token
// (stale, forged, invalid, missing, unavailable) reach [Options.Observe]
// and [Options.Log], once per call, when the interceptor's Fence is
// [ClaimInStore]: log the error yourself where you need its cause — the
// key mismatch above most of all, which is a bug in the handler (with
// storage/postgres, a table whose resource names are not the lock's keys
// needs TableOptions.LockKey).
func Error(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var se *token.StaleError
	var r *refusal
	switch {
	case errors.As(err, &se) && se != nil:
		r = refusalStale(se, err)
		reportStore(ctx, r)
		return r.status(se.Resource)
	case errors.Is(err, token.ErrStale):
		r = &refusal{code: codes.Aborted, reason: ReasonStale, msg: "stale fencing token: a newer lock holder has claimed this resource; the lock was lost"}
	case errors.Is(err, token.ErrForged):
		var t token.Token
		if _, tok, ok := token.FromContext(ctx); ok {
			t = tok
		}
		r = refusalForged(t, err)
	case errors.Is(err, token.ErrInvalid), errors.Is(err, token.ErrRange):
		r = refusalInvalid(err)
		r.msg = "the fencing token is outside the range this resource's store accepts"
	case errors.Is(err, token.ErrNotFound):
		r = &refusal{code: codes.NotFound, reason: ReasonNoResource, msg: "no such resource; nothing was done"}
	case errors.Is(err, token.ErrCondition):
		r = &refusal{code: codes.FailedPrecondition, reason: ReasonCondition, msg: "a condition of the access was false; nothing was changed"}
	case errors.Is(err, token.ErrMissing):
		if _, _, ok := token.FromContext(ctx); ok {
			r = &refusal{code: codes.Internal, reason: ReasonKeyMismatch, msg: "the handler accessed another resource than the call's"}
		} else {
			r = refusalMissing()
		}
	case unreachable(err):
		r = refusalUnavailable("the fencing store could not be reached", err)
	default:
		return err
	}
	switch r.reason {
	case ReasonCondition, ReasonNoResource, ReasonKeyMismatch:
		// The store accepted the token, or was never asked about the
		// call's key: not a verdict on the token.
	default:
		reportStore(ctx, r)
	}
	return r.status("")
}

// reportStore reports a store's refusal of the call's token to
// [Options.Observe] and [Options.Log], once, when the interceptor left
// the decision to the store ([ClaimInStore]).
func reportStore(ctx context.Context, r *refusal) {
	if rep, ok := ctx.Value(storeReportKey{}).(*storeReport); ok {
		rep.report(ctx, r.outcome(rep.key, rep.tok), true)
	}
}

// unreachable reports whether err says a store could not be reached or
// the call ended: nothing was decided.
func unreachable(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
