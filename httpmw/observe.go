package httpmw

import (
	"net/http"

	"github.com/fenceguard/fenceguard/token"
)

// Result names what the middleware decided for a request: one per problem
// type, and two for requests that reach the handler. The values are short
// and fixed, fit for a metric's label.
type Result string

const (
	ResultAccepted    Result = "accepted"    // the Check and the Fence accepted the token: the handler runs
	ResultUnfenced    Result = "unfenced"    // no token where none is required ([Options.Require]): the handler runs, unchecked
	ResultMissing     Result = "missing"     // 428 [TypeMissing]
	ResultInvalid     Result = "invalid"     // 400 [TypeInvalid]: malformed, too long, two headers, or out of the store's range
	ResultNoResource  Result = "no_resource" // 404 [TypeNoResource]
	ResultForged      Result = "forged"      // 403 [TypeForged]
	ResultStale       Result = "stale"       // 409 [TypeStale]
	ResultUnavailable Result = "unavailable" // 503 [TypeUnavailable]
)

// Outcome is one decision of the middleware, for [Options.Observe].
type Outcome struct {
	Result Result
	// Status is the refusal's HTTP status; 0 when the request went on to
	// the handler.
	Status int
	// Resource is the resource key, once derived: "" for a refusal made
	// before (a missing or malformed header is refused before
	// [Options.Resource] runs) and for an unfenced request. It is the
	// server's key, but it comes from the request's route: do not use it
	// as a metric label as is.
	Resource string
	// Token is the token presented, when it parsed.
	Token token.Token
	// Problem is the refusal written (nil when the handler runs); its Err
	// is the cause.
	Problem *Problem
}

// resultOf maps a problem type to its Result.
func resultOf(p *Problem) Result {
	switch p.Type {
	case TypeMissing:
		return ResultMissing
	case TypeInvalid:
		return ResultInvalid
	case TypeNoResource:
		return ResultNoResource
	case TypeForged:
		return ResultForged
	case TypeStale:
		return ResultStale
	}
	return ResultUnavailable
}

// refuse reports a refusal to Observe and Log, then writes it.
func (m *Middleware) refuse(w http.ResponseWriter, r *http.Request, p *Problem, key string, t token.Token) {
	if m.o.Observe != nil || m.o.Log != nil {
		o := Outcome{Result: resultOf(p), Status: p.Status, Resource: key, Token: t, Problem: p}
		if m.o.Observe != nil {
			m.o.Observe(r, o)
		}
		if m.o.Log != nil {
			m.o.Log.Log(r, o)
		}
	}
	m.o.ErrorWriter(w, r, p)
}

// pass reports a request that goes on to the handler to Observe.
func (m *Middleware) pass(r *http.Request, res Result, key string, t token.Token) {
	if m.o.Observe != nil {
		m.o.Observe(r, Outcome{Result: res, Resource: key, Token: t})
	}
}
