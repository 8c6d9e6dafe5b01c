package token

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrForged is the sentinel every [*ForgedError] unwraps to: the presented
// token is above any token the lock could have granted, so it was not
// granted — made up, or sent to a resource it was not granted for.
var ErrForged = errors.New("forged fencing token")

// ForgedError reports a token a [Check] refused as never granted. It
// unwraps to [ErrForged].
type ForgedError struct {
	Resource  string
	Presented Token
	// Bound is the largest token the check accepts for Resource now.
	Bound Token
	// By names the check: "clock" ([ClockBound]) or "sequencer"
	// ([SequencerCheck]).
	By string
}

func (e *ForgedError) Error() string {
	return fmt.Sprintf("forged fencing token for %q: presented %d, above the %s bound %d", e.Resource, e.Presented, e.By, e.Bound)
}

// Unwrap returns [ErrForged].
func (e *ForgedError) Unwrap() error { return ErrForged }

// A Check decides, before a claim, whether a presented token can have been
// granted for the resource at all. It returns nil to let the claim go on, a
// [*ForgedError] to refuse the token as never granted, and any other error
// when it could not decide — which enforcers treat as a refusal (fail
// closed), never as acceptance.
//
// A check only ever bounds tokens from above; staleness is the
// [Fence]'s business. Every enforcer of fenceguard (each Fence, the
// storage/postgres enforcer, the HTTP middleware) takes one: nil selects
// [DefaultCheck].
//
// Implementations are safe for concurrent use.
type Check interface {
	Check(ctx context.Context, resource string, t Token) error
}

// CheckFunc adapts a function to [Check].
type CheckFunc func(ctx context.Context, resource string, t Token) error

// Check implements [Check].
func (f CheckFunc) Check(ctx context.Context, resource string, t Token) error {
	return f(ctx, resource, t)
}

// DefaultSkew is the [ClockBound] skew enforcers use by default: how far a
// token may be ahead of the resource's clock, in microseconds' terms.
// Kerberos tolerates the same skew between clocks.
const DefaultSkew = 5 * time.Minute

// ClockBound is the local plausibility bound for clock-floored tokens —
// memlock's, redislock's and redlock's, which are max(counter + 1, the lock
// server's clock in µs): a token more than Skew ahead of the resource's own
// clock, in µs since the Unix epoch, cannot have been granted yet. It costs
// no round trip.
//
// Threat model: a client that presents a made-up token can raise a mark at
// most to now + Skew, so the honest holders it locks out get through again
// once the lock service's clock passes that mark — within Skew, not never.
// Tokens that are not clock-floored (etcd revisions, ZooKeeper zxids) are far
// below the bound and always pass it: for them it bounds nothing, and only a
// [SequencerCheck] stops a forger. It assumes the lock service's clock and
// the resource's differ by less than Skew, and that no locker counter was
// healed above the clock: a lock server clock more than Skew ahead makes
// honest tokens look forged (refused, never accepted).
//
// The zero ClockBound is [DefaultSkew] on the system clock.
type ClockBound struct {
	// Skew is how far ahead of the resource's clock a token may be.
	// Default [DefaultSkew].
	Skew time.Duration
	// Now reads the resource's clock. Default time.Now.
	Now func() time.Time
}

// Check implements [Check].
func (c ClockBound) Check(_ context.Context, resource string, t Token) error {
	if b := c.Bound(); t > b {
		return &ForgedError{Resource: resource, Presented: t, Bound: b, By: "clock"}
	}
	return nil
}

// Bound returns the largest token c accepts now.
func (c ClockBound) Bound() Token {
	skew := c.Skew
	if skew <= 0 {
		skew = DefaultSkew
	}
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	us := now().UnixMicro() + skew.Microseconds()
	if us < 1 {
		return 1
	}
	return Token(us)
}

// DefaultCheck returns the check enforcers use when theirs is nil: a
// [ClockBound] with [DefaultSkew]. It refuses no token of fenceguard's
// lockers and caps made-up ones at the clock plus five minutes; with
// etcd's or ZooKeeper's tokens add a [SequencerCheck].
func DefaultCheck() Check { return ClockBound{} }

// NoCheck returns a check that accepts every token: for resources whose
// tokens come from a scheme of their own, far above the clock, or tests of
// the whole range. Any client may then lock a resource out for good by
// presenting 2^64−1; see [Resetter] for the way back.
func NoCheck() Check { return noCheck{} }

type noCheck struct{}

func (noCheck) Check(context.Context, string, Token) error { return nil }

// All returns a check that runs checks in order and refuses with the first
// refusal. Nil checks are skipped; All() accepts everything. Put the cheap
// local checks first: a [ClockBound] before a [SequencerCheck] keeps made-up
// tokens from costing a round trip.
func All(checks ...Check) Check {
	var cs []Check
	for _, c := range checks {
		if c != nil {
			cs = append(cs, c)
		}
	}
	return allChecks(cs)
}

type allChecks []Check

func (a allChecks) Check(ctx context.Context, resource string, t Token) error {
	for _, c := range a {
		if err := c.Check(ctx, resource, t); err != nil {
			return err
		}
	}
	return nil
}

// ErrRange is the sentinel every [*RangeError] unwraps to.
var ErrRange = errors.New("fencing token out of range")

// RangeError reports a token beyond what a store or a lock service can
// represent exactly: PostgreSQL's bigint ends at 2^63−1, and a locker's
// counter refuses to grant past its ceiling rather than repeat a token. It
// unwraps to [ErrRange].
type RangeError struct {
	// What has the limit, e.g. "PostgreSQL bigint" or "redislock counter".
	What  string
	Token Token
	Max   Token
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("fencing token %d is beyond the %s's maximum %d", e.Token, e.What, e.Max)
}

// Unwrap returns [ErrRange].
func (e *RangeError) Unwrap() error { return ErrRange }

// MaxInt64 is the largest token a signed 64-bit integer holds: the
// ceiling of fenceguard's lockers whose counters can be healed (so every
// token they grant fits PostgreSQL's bigint and any int64 column) and of
// the PostgreSQL enforcer.
const MaxInt64 Token = math.MaxInt64
