package token

import (
	"context"
	"time"

	"github.com/fenceguard/fenceguard/token/internal/rule"
)

// NewContext returns a copy of ctx that carries t together with the key it
// was granted for. The guard runtime puts the lease's lock key and token
// there; resource-side middleware puts the resource key it derived and the
// token it accepted.
//
// A context made from one that already carries tokens carries them all:
// inside a critical section over several keys, or one nested in another,
// ctx carries every key held around it. FromContext answers the innermost.
//
// An enforcer given the zero token uses the token ctx carries for the very
// key it is fencing; when ctx carries none for that key it refuses the call
// with an error wrapping [ErrMissing] that names the key.
func NewContext(ctx context.Context, key string, t Token) context.Context {
	return rule.NewContext(ctx, key, uint64(t))
}

// FromContext returns the key and token ctx carries (the innermost, when it
// carries several), and whether it carries one. A context without a token yields ("", 0, false).
func FromContext(ctx context.Context) (key string, t Token, ok bool) {
	k, v, ok := rule.FromContext(ctx)
	return k, Token(v), ok
}

// Lookup returns the token ctx carries for key, and whether it carries
// one: the token of key's lease when ctx is the context of a critical
// section over key, alone or with other keys.
func Lookup(ctx context.Context, key string) (Token, bool) {
	v, ok := rule.Lookup(ctx, key)
	return Token(v), ok
}

type expiryKey struct{}

// WithExpiry returns a copy of ctx that carries expiry, a function that
// reports when the lease behind ctx's token ends: the holder's own
// conservative estimate, after which it must not act under the token. The
// guard runtime puts it in the contexts of its leases and of [guard.Do]'s
// fn, reporting the lease's current local deadline (it moves on with every
// renewal) and a time in the past once the lease is lost or released.
//
// A resource that holds something for the holder (a database transaction
// with the resource's row locked) reads it with [Expiry] to end its hold
// with the lease instead of by a setting of its own.
//
// [guard.Do]: https://pkg.go.dev/github.com/fenceguard/fenceguard/guard#Guard.Do
func WithExpiry(ctx context.Context, expiry func() time.Time) context.Context {
	return context.WithValue(ctx, expiryKey{}, expiry)
}

// Expiry returns when the lease behind ctx's token ends, as reported now by
// the function [WithExpiry] put in ctx, and whether ctx carries one.
func Expiry(ctx context.Context) (time.Time, bool) {
	f, _ := ctx.Value(expiryKey{}).(func() time.Time)
	if f == nil {
		return time.Time{}, false
	}
	return f(), true
}
