package token

import (
	"context"
	"errors"
	"fmt"

	"github.com/fenceguard/fenceguard/token/internal/rule"
)

// ErrStale is the sentinel every [*StaleError] unwraps to: the presented
// token is lower than one the resource has already accepted, so its holder
// has lost the lock and must not touch the resource.
var ErrStale = errors.New("stale fencing token")

// ErrNoResource means a resource key was empty. Keys come from the resource
// (a route, a row); an empty one is a bug in the code that derives it.
var ErrNoResource = rule.ErrNoResource

// ErrNotFound is what a store enforcer's "no such row" unwraps to (in
// storage/postgres, ErrNoRow): the guarded resource does not exist, and
// nothing was written or claimed. It lets code that serves many stores —
// httpmw's WriteError, its Transport on the client — tell this answer
// apart without knowing the store.
var ErrNotFound = errors.New("no such resource")

// ErrCondition is what a store enforcer's "condition not met" unwraps to
// (in storage/postgres, every ConditionError): the token was accepted, but
// a condition of the access was false, so nothing was changed.
var ErrCondition = errors.New("condition not met")

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
// token for resource itself: see [NewContext]) and [ErrNoResource] for an empty
// key, and does not change any high-water then. Any other error means the
// check could not be made: callers must treat that as a refusal (fail
// closed), never as acceptance.
//
// Implementations are safe for concurrent use.
type Fence interface {
	Claim(ctx context.Context, resource string, t Token) error
}

// A Resetter is a [Fence] whose marks an operator may set by hand: the way
// back for a resource whose mark a forged token poisoned (every honest
// holder refused as stale).
//
// Reset sets the mark of exactly the resource it names to to, whatever the
// mark was, lower or higher, and returns the mark it replaced (0 when there
// was none). It refuses an empty name with [ErrNoResource] (one call, one
// resource: no patterns) and the zero token with [ErrMissing] (a mark of
// zero would let in every holder ever refused). Every Reset is logged at
// Warn level, with the resource and both marks, through the store's logger
// (slog.Default() unless the store was given one).
//
// Reset to the token of the lock's current grant ([Sequencer]'s Current):
// the current holder and every later one are accepted, every earlier one is
// still refused. Resetting below a token a live holder has used lets an
// older holder back in; that is why Reset is a separate operation and not
// a Claim.
type Resetter interface {
	Reset(ctx context.Context, resource string, to Token) (prev Token, err error)
}
