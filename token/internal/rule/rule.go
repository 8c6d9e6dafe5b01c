// Package rule holds, once, the rules every enforcer of fenceguard applies
// to its arguments: package token's own Fence uses them, and package
// token/enforce exports them to the enforcers of other packages. It works
// on plain uint64 tokens so that package token can import it.
package rule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
)

// ErrMissing and ErrNoResource are package token's sentinels of the same
// names.
var (
	ErrMissing    = errors.New("missing fencing token")
	ErrNoResource = errors.New("empty resource key")
)

// Claim validates the arguments of a claim.
func Claim(resource string, t uint64) error {
	if resource == "" {
		return ErrNoResource
	}
	if t == 0 {
		return fmt.Errorf("claim %q: %w", resource, ErrMissing)
	}
	return nil
}

// Reset validates the arguments of a reset.
func Reset(resource string, to uint64) error {
	if resource == "" {
		return fmt.Errorf("reset: %w", ErrNoResource)
	}
	if to == 0 {
		return fmt.Errorf("reset %q to 0: %w (reset to the lock's current token instead)", resource, ErrMissing)
	}
	return nil
}

// LogReset writes the audit record of a reset; a nil logger is
// slog.Default().
func LogReset(ctx context.Context, l *slog.Logger, store, resource string, prev, to uint64) {
	if l == nil {
		l = slog.Default()
	}
	l.WarnContext(ctx, "fenceguard: fencing mark reset by hand",
		slog.String("store", store), slog.String("resource", resource),
		slog.String("from", strconv.FormatUint(prev, 10)), slog.String("to", strconv.FormatUint(to, 10)))
}

type ctxKey struct{}

// tokenCtx carries a key and its token in one context node: one allocation
// where context.WithValue would take two (the node and the boxed value).
type tokenCtx struct {
	context.Context
	key string
	t   uint64
}

func (c *tokenCtx) Value(k any) any {
	if _, ok := k.(ctxKey); ok {
		return c
	}
	return c.Context.Value(k)
}

// NewContext returns a copy of ctx carrying key and t.
func NewContext(ctx context.Context, key string, t uint64) context.Context {
	return &tokenCtx{Context: ctx, key: key, t: t}
}

// FromContext returns the key and token ctx carries.
func FromContext(ctx context.Context) (key string, t uint64, ok bool) {
	c, ok := ctx.Value(ctxKey{}).(*tokenCtx)
	if !ok {
		return "", 0, false
	}
	return c.key, c.t, true
}

// Resolve returns t, or for the zero token the context's token when the
// context carries it for key itself; a context token of another key is
// refused with an error wrapping ErrMissing that names both keys.
func Resolve(ctx context.Context, key string, t uint64) (uint64, error) {
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
		return 0, fmt.Errorf("%w for %q: the context carries the token of %q, another key (pass the token explicitly, or fence the key it was granted for)", ErrMissing, key, ck)
	}
}
