package token

import "context"

type ctxKey struct{}

type carried struct {
	resource string
	t        Token
}

// NewContext returns a copy of ctx that carries t together with the key it
// was granted for. The guard runtime puts the lease's lock key and token
// there; resource-side middleware puts the resource key it derived and the
// token it accepted.
func NewContext(ctx context.Context, key string, t Token) context.Context {
	return context.WithValue(ctx, ctxKey{}, carried{key, t})
}

// FromContext returns the key and token ctx carries, and whether it carries
// one. A context without a token yields ("", 0, false).
func FromContext(ctx context.Context) (key string, t Token, ok bool) {
	c, ok := ctx.Value(ctxKey{}).(carried)
	return c.resource, c.t, ok
}
