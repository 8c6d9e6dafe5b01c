package httpmw

import (
	"context"
	"errors"
	"net"
	"net/http"

	"github.com/fenceguard/fenceguard/token"
)

// ErrUnavailable is what a [TypeUnavailable] refusal unwraps to on the
// client ([Transport]): the fencing check could not be made or the store
// could not be reached or stopped answering. From the middleware it means
// nothing was done; from [WriteError] a store that stopped answering
// during a write may have applied it (storage/postgres reads a COMMIT's
// outcome back where it can, and says when it cannot), so retry only what
// is safe to repeat. A server's own error wrapping it is answered 503 by
// WriteError.
var ErrUnavailable = errors.New("httpmw: fencing check or store unavailable")

// ErrKeyMismatch is what a [TypeKeyMismatch] answer unwraps to on the
// client ([Transport]): the server accessed another resource than the one
// the middleware accepted the token for — the route's key and the store's
// lock key disagree, a bug in the server, not in the request. A server's
// own error wrapping it is answered 500 by [WriteError].
var ErrKeyMismatch = errors.New("httpmw: the store's lock key is not the route's resource key")

// WriteError writes the problem that answers err, an error of a store
// enforcer (storage/postgres, a [token.Fence]) met by a handler behind the
// middleware, so that a service writes no mapping of its own and the
// client's [Transport] turns the answer back into an error matching the
// same sentinel. When err matches several, the first of these wins:
//
//   - [ErrKeyMismatch]: 500 [TypeKeyMismatch] (below).
//   - [token.ErrStale] (a [*token.StaleError]): 409 [TypeStale], with the
//     mark, as the middleware's own refusal (without it when err carries
//     none).
//   - [token.ErrCondition] (storage/postgres's ErrCondition): 409
//     [TypeCondition]; the token was accepted, nothing was changed.
//   - [token.ErrNotFound] (storage/postgres's ErrNoRow): 404
//     [TypeNoResource].
//   - [token.ErrForged]: 403 [TypeForged], with the bound of a
//     [*token.ForgedError].
//   - [token.ErrInvalid], [token.ErrRange]: 400 [TypeInvalid] (a token
//     beyond what the store holds).
//   - [token.ErrMissing]: when r's context carries a token, the store was
//     asked about another lock's key than the one the token was accepted
//     for: 500 [TypeKeyMismatch] (fix the route's key template or the
//     store's lock-key mapping, storage/postgres's TableOptions.LockKey).
//     Without one, the request needed a token it did not carry: 428
//     [TypeMissing].
//   - the store or the check could not be reached: a [net.Error], a
//     context that ended ([context.DeadlineExceeded], or
//     [context.Canceled] — the client left), an error that reports
//     SafeToRetry (pgx: nothing was sent) or wraps [ErrUnavailable]: 503
//     [TypeUnavailable].
//   - anything else: 500 with type "about:blank" and no detail.
//
// Bodies never carry err's text, which may name internals. WriteError
// returns the problem it wrote, err in its Err, for logging (a Status of
// 500 or more is the server's failure, not the client's). Handle a
// service's own errors (a sold-out item, a body it refuses) before calling
// it, and call it before the handler wrote anything (see [WriteProblem]).
// A nil err is a 500 like any unknown error; a nil *token.StaleError (or
// *token.ForgedError) in err is answered as the sentinel it stands for,
// without a mark (or bound).
func WriteError(w http.ResponseWriter, r *http.Request, err error) *Problem {
	p := errorProblem(r, err)
	WriteProblem(w, p)
	return p
}

// errorProblem is the problem [WriteError] writes for err.
func errorProblem(r *http.Request, err error) *Problem {
	var (
		se *token.StaleError
		t  token.Token
	)
	if r != nil {
		_, t, _ = token.FromContext(r.Context())
	}
	switch {
	case errors.Is(err, ErrKeyMismatch):
		return problemKeyMismatch(err)
	case errors.As(err, &se) && se != nil:
		return problemStale(se, err)
	case errors.Is(err, token.ErrStale):
		return &Problem{Type: TypeStale, Title: titleStale, Status: http.StatusConflict, Detail: detailStale, Presented: t, Err: err}
	case errors.Is(err, token.ErrCondition):
		return &Problem{
			Type:      TypeCondition,
			Title:     "Condition not met",
			Status:    http.StatusConflict,
			Detail:    "the token was accepted, but a condition of the request was false; nothing was changed",
			Presented: t,
			Err:       err,
		}
	case errors.Is(err, token.ErrNotFound):
		return &Problem{
			Type:   TypeNoResource,
			Title:  "No such resource",
			Status: http.StatusNotFound,
			Detail: "the resource does not exist; nothing was changed",
			Err:    err,
		}
	case errors.Is(err, token.ErrForged):
		return problemForged(t, err)
	case errors.Is(err, token.ErrInvalid), errors.Is(err, token.ErrRange):
		p := problemInvalid(err)
		if errors.Is(err, token.ErrRange) {
			p.Detail = "the token is outside the range this resource's store accepts"
		}
		return p
	case errors.Is(err, token.ErrMissing) && !t.IsZero():
		return problemKeyMismatch(err)
	case errors.Is(err, token.ErrMissing):
		p := problemMissing()
		p.Err = err
		return p
	case unavailable(err):
		return &Problem{
			Type:   TypeUnavailable,
			Title:  "Fencing check unavailable",
			Status: http.StatusServiceUnavailable,
			Detail: "the fencing check or the store could not be reached or stopped answering; a write it stopped answering during may have taken effect",
			Err:    err,
		}
	}
	return &Problem{
		Type:   "about:blank",
		Title:  http.StatusText(http.StatusInternalServerError),
		Status: http.StatusInternalServerError,
		Err:    err,
	}
}

func problemKeyMismatch(err error) *Problem {
	return &Problem{
		Type:   TypeKeyMismatch,
		Title:  "Fencing key mismatch",
		Status: http.StatusInternalServerError,
		Detail: "the server accessed another resource than the one the token was accepted for; nothing was changed",
		Err:    err,
	}
}

// unavailable reports whether err says the store or the check could not
// be reached, as opposed to refusing or failing.
func unavailable(err error) bool {
	var (
		ne    net.Error
		retry interface{ SafeToRetry() bool }
	)
	return errors.Is(err, ErrUnavailable) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.As(err, &ne) ||
		errors.As(err, &retry) && retry.SafeToRetry()
}
