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
// A node made from a context that already carries a token keeps the outer
// node too, so a context carries the tokens of every key held around it.
type tokenCtx struct {
	context.Context
	key   string
	t     uint64
	outer *tokenCtx
}

func (c *tokenCtx) Value(k any) any {
	if _, ok := k.(ctxKey); ok {
		return c
	}
	return c.Context.Value(k)
}

// NewContext returns a copy of ctx carrying key and t, besides the tokens
// ctx already carries.
func NewContext(ctx context.Context, key string, t uint64) context.Context {
	outer, _ := ctx.Value(ctxKey{}).(*tokenCtx)
	return &tokenCtx{Context: ctx, key: key, t: t, outer: outer}
}

// FromContext returns the key and token ctx carries.
func FromContext(ctx context.Context) (key string, t uint64, ok bool) {
	c, ok := ctx.Value(ctxKey{}).(*tokenCtx)
	if !ok {
		return "", 0, false
	}
	return c.key, c.t, true
}

// Lookup returns the token ctx carries for key (the innermost, when it
// carries several for key).
func Lookup(ctx context.Context, key string) (uint64, bool) {
	for c, _ := ctx.Value(ctxKey{}).(*tokenCtx); c != nil; c = c.outer {
		if c.key == key && c.t != 0 {
			return c.t, true
		}
	}
	return 0, false
}

// Resolve returns t, or for the zero token the token ctx carries for key
// itself (the innermost, when it carries several for key). A context that
// carries tokens, none of them for key, is refused with an error wrapping
// ErrMissing that names key and the innermost key it carries.
func Resolve(ctx context.Context, key string, t uint64) (uint64, error) {
	if t != 0 {
		return t, nil
	}
	var other *tokenCtx
	for c, _ := ctx.Value(ctxKey{}).(*tokenCtx); c != nil; c = c.outer {
		switch {
		case c.t == 0:
		case c.key == key:
			return c.t, nil
		case other == nil:
			other = c
		}
	}
	if other == nil {
		return 0, nil
	}
	return 0, fmt.Errorf("%w for %q: the context carries the token of %q, another key (pass the token explicitly, or fence the key it was granted for)", ErrMissing, key, other.key)
}
