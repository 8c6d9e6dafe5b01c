package postgres

import (
	"context"
	"fmt"

	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/enforce"
)

// Fence is a [token.Fence] that keeps each resource's high-water mark in a
// PostgreSQL high-water table, for resources served by several processes
// (the HTTP middleware uses it). Each claim is one autocommitted statement
// (an upsert guarded by the mark), so concurrent claims from any number of
// processes see one order.
//
// Each distinct resource claimed costs one row, until [Tokens.Prune]
// deletes the marks idle for long enough and raises the table's floor, so
// that a pruned key still refuses what it refused before (a mark deleted
// any other way would let a stale holder in). Run Prune periodically to
// keep the table bounded by the keys in use rather than every key ever
// named.
//
// Each claim first runs the Tokens' check ([TokensOptions.Check];
// [token.DefaultCheck], the clock bound, for [NewFence]): a token it
// refuses is returned as its [*token.ForgedError] and sends nothing.
// [Fence.Reset] sets a poisoned mark back by hand.
//
// Acceptance, an equal token included, is decided by the upsert's
// conditional write on the server the DB is connected to, never by a read:
// on a hot standby every claim fails (read-only transaction) rather than
// being accepted. Give the Fence a connection to the primary.
//
// A Fence is safe for concurrent use if its DB is (a pool is; a single
// [pgx.Conn] is not).
type Fence struct {
	db     DB
	tokens *Tokens
}

var (
	_ token.Fence    = (*Fence)(nil)
	_ token.Resetter = (*Fence)(nil)
)

// NewFence returns a Fence on the default high-water table (fence_tokens on
// the search_path), with the default check. See [Tokens.Fence] for another
// table or another check.
func NewFence(db DB) *Fence { return defaultTokens.Fence(db) }

// Fence returns a [Fence] keeping its marks in k, on db, and running k's
// check.
func (k *Tokens) Fence(db DB) *Fence { return &Fence{db: db, tokens: k} }

// Claim implements [token.Fence]: it advances resource's mark to t unless
// a higher token was accepted, in which case it returns a
// [*token.StaleError] with the current mark. A zero t is the context's
// token when the context carries one for resource itself
// ([enforce.Resolve]), else [token.ErrMissing].
func (f *Fence) Claim(ctx context.Context, resource string, t token.Token) error {
	if err := lockMismatch(ctx, fmt.Sprintf("claim %q", resource), resource, t, fenceHint); err != nil {
		return err
	}
	t, err := enforce.Resolve(ctx, resource, t)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if err := enforce.CheckClaim(resource, t); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if f.db == nil {
		return fmt.Errorf("%w: nil DB", ErrBadInput)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("postgres: claim %s: %w", resource, err)
	}
	v, err := admit(ctx, f.tokens.check, resource, t)
	if err != nil {
		return err
	}
	return f.tokens.claim(ctx, f.db, claims{{resource: resource, t: t, v: v}})
}

// HighWater returns the highest token resource has accepted, 0 if none.
func (f *Fence) HighWater(ctx context.Context, resource string) (token.Token, error) {
	return f.tokens.HighWater(ctx, f.db, resource)
}
