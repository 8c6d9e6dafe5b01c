// Package enforce is for people who write enforcers: a [token.Fence] on a
// store of their own, or a store adapter that claims inside its own
// statements. It holds the rules every enforcer of fenceguard applies, so
// that all of them refuse the same input the same way. Users of the
// existing enforcers do not need it.
//
// An enforcer's Claim resolves the token ([Resolve]), admits it ([Admit]:
// the argument rules and the forged-token [token.Check]) and only then
// touches its store; a Reset validates its arguments ([CheckReset]) and
// logs the change ([LogReset]):
//
//	func (f *myFence) Claim(ctx context.Context, resource string, t token.Token) error {
//		t, err := enforce.Resolve(ctx, resource, t)
//		if err != nil {
//			return err
//		}
//		if err := enforce.Admit(ctx, f.check, resource, t); err != nil {
//			return err
//		}
//		// check and advance the mark in one atomic step of the store
//	}
//
// Package token/fencetest checks a Fence against the whole contract.
package enforce

import (
	"context"
	"log/slog"

	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/internal/rule"
)

// Resolve is the one rule by which an enforcer takes a token from the
// context. A non-zero t is returned as is. For the zero token it returns
// the token the context carries for key itself ([token.Lookup]), and 0
// when the context carries none at all (the enforcer then refuses it as
// missing, through [Admit]). A context token granted for another key is
// never used: when the context carries tokens but none for key, Resolve
// returns an error wrapping [token.ErrMissing] that names both keys.
func Resolve(ctx context.Context, key string, t token.Token) (token.Token, error) {
	v, err := rule.Resolve(ctx, key, uint64(t))
	return token.Token(v), err
}

// CheckClaim validates the arguments of [token.Fence.Claim]: an empty
// resource is [token.ErrNoResource], the zero token wraps
// [token.ErrMissing].
func CheckClaim(resource string, t token.Token) error {
	return rule.Claim(resource, uint64(t))
}

// Admit is what every enforcer does before it touches its store: it
// validates the arguments of a claim ([CheckClaim]) and runs c on them,
// [token.DefaultCheck] when c is nil. Its error is a refusal; a refusal
// moves no mark.
func Admit(ctx context.Context, c token.Check, resource string, t token.Token) error {
	if err := CheckClaim(resource, t); err != nil {
		return err
	}
	if c == nil {
		c = token.DefaultCheck()
	}
	return c.Check(ctx, resource, t)
}

// CheckReset validates the arguments of [token.Resetter.Reset]: an empty
// resource wraps [token.ErrNoResource], a reset to the zero token wraps
// [token.ErrMissing].
func CheckReset(resource string, to token.Token) error {
	return rule.Reset(resource, uint64(to))
}

// LogReset writes the audit record of a reset at Warn level: every
// [token.Resetter] calls it once the new mark is stored. store names the
// kind of store ("memory", "postgres", …); a nil logger is slog.Default().
func LogReset(ctx context.Context, l *slog.Logger, store, resource string, prev, to token.Token) {
	rule.LogReset(ctx, l, store, resource, uint64(prev), uint64(to))
}
