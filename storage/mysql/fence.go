package mysql

import (
	"context"
	"fmt"

	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/enforce"
)

// Fence is a [token.Fence] that keeps each resource's high-water mark in a
// MySQL or MariaDB high-water table, for resources served by several
// processes (the HTTP middleware uses it). Each claim is one statement (an
// upsert guarded by the mark), so concurrent claims from any number of
// processes see one order.
//
// Each claim first runs the Tokens' check ([TokensOptions.Check];
// [token.DefaultCheck], the clock bound, for [NewFence]): a token it
// refuses is returned as its [*token.ForgedError] and sends nothing.
// [Fence.Reset] sets a poisoned mark back by hand.
//
// Acceptance, an equal token included, is decided by the upsert's write
// under the row's lock on the server the DB is connected to, never by a
// read: on a read-only replica every claim fails rather than being
// accepted. Give the Fence a connection to the primary.
//
// A Fence is safe for concurrent use if its DB is (a *sql.DB is; a
// *sql.Conn or *sql.Tx is not).
type Fence struct {
	db     DB
	tokens *Tokens
}

var (
	_ token.Fence    = (*Fence)(nil)
	_ token.Resetter = (*Fence)(nil)
)

// NewFence returns a Fence on the default high-water table (fence_tokens in
// the connection's database), with the default check. See [Tokens.Fence]
// for another table or another check.
func NewFence(db DB) *Fence { return defaultTokens.Fence(db) }

// Fence returns a [Fence] keeping its marks in k, on db, and running k's
// check.
func (k *Tokens) Fence(db DB) *Fence { return &Fence{db: db, tokens: k} }

// Claim implements [token.Fence]: it advances resource's mark to t unless
// a higher token was accepted, in which case it returns a
// [*token.StaleError] with that mark. A zero t is the context's token when
// the context carries one for resource itself ([enforce.Resolve]), else
// [token.ErrMissing]. A claim InnoDB picks as a deadlock victim returns
// an error wrapping [ErrDeadlock]: it wrote nothing, and on a *sql.Tx the
// whole transaction was rolled back.
//
// The claim sets the session's LAST_INSERT_ID() to the mark it found when
// the resource had one (that is how the server reports it without
// RETURNING): on a *sql.Conn or *sql.Tx of the caller's, read an
// AUTO_INCREMENT id before claiming, not after.
func (f *Fence) Claim(ctx context.Context, resource string, t token.Token) error {
	t, err := enforce.Resolve(ctx, resource, t)
	if err != nil {
		return fmt.Errorf("mysql: %w", err)
	}
	if err := enforce.CheckClaim(resource, t); err != nil {
		return fmt.Errorf("mysql: %w", err)
	}
	if f.db == nil {
		return fmt.Errorf("%w: nil DB", ErrBadInput)
	}
	if err := checkResource(resource); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mysql: claim %s: %w", resource, err)
	}
	if err := enforce.Admit(ctx, f.tokens.check, resource, t); err != nil {
		return fmt.Errorf("mysql: %w", err)
	}
	return f.tokens.claim(ctx, f.db, resource, t)
}

// HighWater returns the highest token resource has accepted, 0 if none.
func (f *Fence) HighWater(ctx context.Context, resource string) (token.Token, error) {
	return f.tokens.HighWater(ctx, f.db, resource)
}

// Reset implements [token.Resetter]: it sets resource's mark to to,
// whatever it was, in one statement, logs the change at Warn level
// through [TokensOptions.Logger], and returns the mark it replaced (0
// when there was none). It refuses an empty resource and the zero token.
// Reset to the token of the lock's current grant; see [token.Resetter].
func (f *Fence) Reset(ctx context.Context, resource string, to token.Token) (token.Token, error) {
	return f.tokens.Reset(ctx, f.db, resource, to)
}
