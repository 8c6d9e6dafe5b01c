package token

import (
	"context"
	"fmt"
	"log/slog"
)

// A Resetter is a [Fence] whose marks an operator may set by hand: the way
// back for a resource whose mark a forged token poisoned (every honest
// holder refused as stale), without hand-written SQL or Redis commands.
//
// Reset sets the mark of exactly the resource it names to to, whatever the
// mark was — lower or higher — and returns the mark it replaced (0 when
// there was none). It is refused with [ErrNoResource] for an empty name
// (there are no patterns: one call, one resource) and with [ErrMissing]
// for the zero token: a mark of zero would let in every holder that was
// ever refused. Every Reset is logged at Warn level, with the resource and
// both marks, through the store's logger (slog.Default() unless the store
// was given one), so that it shows up in an audit.
//
// Reset to the token of the lock's current grant ([Sequencer]'s Current):
// the current holder and every later one are accepted, every earlier one
// still refused. Resetting below a token that a live holder has used
// lets an older holder back in; that is why Reset is a separate, named
// operation and not a Claim.
type Resetter interface {
	Reset(ctx context.Context, resource string, to Token) (prev Token, err error)
}

// CheckReset validates the arguments of [Resetter.Reset]. Implementations
// call it first so every store refuses bad input alike.
func CheckReset(resource string, to Token) error {
	if resource == "" {
		return fmt.Errorf("reset: %w", ErrNoResource)
	}
	if to == 0 {
		return fmt.Errorf("reset %q to 0: %w (reset to the lock's current token instead)", resource, ErrMissing)
	}
	return nil
}

// LogReset writes the audit record of a reset: every [Resetter] calls it
// once the new mark is stored. A nil logger is slog.Default().
func LogReset(ctx context.Context, l *slog.Logger, store, resource string, prev, to Token) {
	if l == nil {
		l = slog.Default()
	}
	l.WarnContext(ctx, "fenceguard: fencing mark reset by hand",
		slog.String("store", store), slog.String("resource", resource),
		slog.String("from", prev.String()), slog.String("to", to.String()))
}
