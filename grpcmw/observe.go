package grpcmw

import (
	"google.golang.org/grpc/codes"

	"github.com/fenceguard/fenceguard/token"
)

// Result names what the interceptor decided for a call: one per refusal
// reason, and two for calls that reach the handler. The values are those
// of httpmw's Result, short and fixed, fit for a metric's label.
type Result string

const (
	ResultAccepted    Result = "accepted"    // the Check and the Fence accepted the token: the handler runs
	ResultUnfenced    Result = "unfenced"    // no token where none is required ([Options.Require]): the handler runs, unchecked
	ResultMissing     Result = "missing"     // FAILED_PRECONDITION [ReasonMissing]
	ResultInvalid     Result = "invalid"     // INVALID_ARGUMENT [ReasonInvalid]
	ResultNoResource  Result = "no_resource" // INVALID_ARGUMENT [ReasonNoResource]
	ResultForged      Result = "forged"      // PERMISSION_DENIED [ReasonForged]
	ResultStale       Result = "stale"       // ABORTED [ReasonStale]
	ResultUnavailable Result = "unavailable" // UNAVAILABLE [ReasonUnavailable]
)

// Outcome is one decision of the interceptor, for [Options.Observe].
type Outcome struct {
	Result Result
	// Code is the refusal's status code; codes.OK when the call went on
	// to the handler.
	Code codes.Code
	// Resource is the resource key, once derived: "" for a refusal made
	// before [Options.Resource] ran and for an unfenced call. It comes
	// from the request: do not use it as a metric label as is.
	Resource string
	// Token is the token presented, when it parsed.
	Token token.Token
	// Err is the cause of a refusal, for logging; it is never sent to
	// the client.
	Err error
}

func resultOf(reason string) Result {
	switch reason {
	case ReasonMissing:
		return ResultMissing
	case ReasonInvalid:
		return ResultInvalid
	case ReasonNoResource:
		return ResultNoResource
	case ReasonForged:
		return ResultForged
	case ReasonStale:
		return ResultStale
	}
	return ResultUnavailable
}
