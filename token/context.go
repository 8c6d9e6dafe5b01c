package token

import (
	"context"
	"fmt"
)

type ctxKey struct{}

// tokenCtx carries a key and its token in one context node: one allocation
// where context.WithValue would take two (the node and the boxed value).
type tokenCtx struct {
	context.Context
	key string
	t   Token
}

func (c *tokenCtx) Value(k any) any {
	if _, ok := k.(ctxKey); ok {
		return c
	}
	return c.Context.Value(k)
}

// NewContext returns a copy of ctx that carries t together with the key it
// was granted for. The guard runtime puts the lease's lock key and token
// there; resource-side middleware puts the resource key it derived and the
// token it accepted.
func NewContext(ctx context.Context, key string, t Token) context.Context {
	return &tokenCtx{Context: ctx, key: key, t: t}
}

// FromContext returns the key and token ctx carries, and whether it carries
// one. A context without a token yields ("", 0, false).
func FromContext(ctx context.Context) (key string, t Token, ok bool) {
	c, ok := ctx.Value(ctxKey{}).(*tokenCtx)
	if !ok {
		return "", 0, false
	}
	return c.key, c.t, true
}

// Resolve is the one rule by which every fenceguard enforcer (the Fences,
// storage/postgres's Table and Tx) takes a token from the context: a call
// that passes the zero token uses the context's token only when the
// context carries it for the very key the call fences. A token is a grant
// of one lock; used against another key it would claim a resource its lock
// does not guard — outranking, with another lock's larger number, the
// holders of the lock that does — so a context token for another key is
// never used: Resolve then returns an error wrapping [ErrMissing] that
// names both keys, so the mix-up shows. A non-zero t is returned as is,
// whatever the context carries (an explicit token is the caller's
// decision), and so is the zero token when the context carries none (the
// enforcer then refuses it as missing).
func Resolve(ctx context.Context, key string, t Token) (Token, error) {
	if t != 0 {
		return t, nil
	}
	ck, ct, ok := FromContext(ctx)
	switch {
	case !ok || ct == 0:
		return 0, nil
	case ck == key:
		return ct, nil
	default:
		return 0, &MismatchError{Key: key, ContextKey: ck}
	}
}

// MismatchError is [Resolve]'s refusal of a context token granted for
// another key. It wraps [ErrMissing].
type MismatchError struct {
	Key        string // the key the call fences
	ContextKey string // the key the context's token was granted for
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("%s for %q: the context carries the token of %q, another key (pass the token explicitly, or fence the key it was granted for)", ErrMissing, e.Key, e.ContextKey)
}

func (e *MismatchError) Unwrap() error { return ErrMissing }
