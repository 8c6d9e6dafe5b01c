package token

import (
	"context"

	"github.com/fenceguard/fenceguard/token/internal/rule"
)

// NewContext returns a copy of ctx that carries t together with the key it
// was granted for. The guard runtime puts the lease's lock key and token
// there; resource-side middleware puts the resource key it derived and the
// token it accepted.
//
// An enforcer given the zero token uses the context's token only for the
// very key it was granted for; for another key it refuses the call with an
// error wrapping [ErrMissing] that names both keys.
func NewContext(ctx context.Context, key string, t Token) context.Context {
	return rule.NewContext(ctx, key, uint64(t))
}

// FromContext returns the key and token ctx carries, and whether it carries
// one. A context without a token yields ("", 0, false).
func FromContext(ctx context.Context) (key string, t Token, ok bool) {
	k, v, ok := rule.FromContext(ctx)
	return k, Token(v), ok
}
