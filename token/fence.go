package token

import (
	"context"
	"errors"
	"fmt"
)

// ErrStale is the sentinel every [*StaleError] unwraps to: the presented
// token is lower than one the resource has already accepted, so its holder
// has lost the lock and must not touch the resource.
var ErrStale = errors.New("stale fencing token")

// ErrNoResource means a resource key was empty. Keys come from the resource
// (a route, a row); an empty one is a bug in the code that derives it.
var ErrNoResource = errors.New("empty resource key")

// StaleError reports a token lower than the resource's high-water mark. It
// unwraps to [ErrStale].
//
// Current is the high-water the resource holds. A holder whose locker can
// regress (one that lost its counter) may use it to heal that locker, so the
// next grant gets a token above it.
type StaleError struct {
	Resource  string
	Presented Token
	Current   Token
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("stale fencing token for %q: presented %d, resource has seen %d", e.Resource, e.Presented, e.Current)
}

// Unwrap returns [ErrStale].
func (e *StaleError) Unwrap() error { return ErrStale }

// A Fence is the resource side of fencing: per resource key, it keeps the
// highest token accepted so far.
//
// Claim accepts t when it is not lower than the key's high-water and makes t
// the new high-water, atomically with the check. It rejects a lower token
// with a [*StaleError] carrying the current high-water. It returns an error
// wrapping [ErrMissing] for the zero token (unless the context carries a
// token for resource itself: see [Resolve]) and [ErrNoResource] for an empty
// key, and does not change any high-water then. Any other error means the
// check could not be made: callers must treat that as a refusal (fail
// closed), never as acceptance.
//
// Implementations are safe for concurrent use.
type Fence interface {
	Claim(ctx context.Context, resource string, t Token) error
}

// CheckClaim validates the arguments of [Fence.Claim]. Fence
// implementations call it first so every Fence rejects bad input alike.
func CheckClaim(resource string, t Token) error {
	if resource == "" {
		return ErrNoResource
	}
	if t == 0 {
		return fmt.Errorf("claim %q: %w", resource, ErrMissing)
	}
	return nil
}
