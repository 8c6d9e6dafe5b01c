package token

import "context"

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
