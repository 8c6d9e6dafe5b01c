package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/enforce"
)

// claim is one resource of a fenced transaction, with its token resolved
// and admitted.
type claim struct {
	resource string
	t        token.Token
	v        int64 // t as bigint
}

// claims are the resources one fenced transaction claims, in the order it
// claims them: sorted by their bytes — Go's string order, and PostgreSQL's
// under COLLATE "C" — each once. Every transaction over overlapping sets
// locks the marks' rows in that one order, so none waits for another that
// waits for it.
type claims []claim

// name names the resources in messages: the resource, or all of them in
// order, joined by ", ".
func (c claims) name() string {
	if len(c) == 1 {
		return c[0].resource
	}
	return strings.Join(c.resources(), ", ")
}

// resources returns the resources in order.
func (c claims) resources() []string {
	rs := make([]string, len(c))
	for i, x := range c {
		rs[i] = x.resource
	}
	return rs
}

// stale is the refusal of c[i] by the mark cur.
func (c claims) stale(i int, cur token.Token) error {
	return &token.StaleError{Resource: c[i].resource, Presented: c[i].t, Current: cur}
}

// maxClaims is the most resources one claim statement takes: two
// parameters each and two more, within PostgreSQL's 65,535.
const maxClaims = (65535 - 2) / 2

// resolveAll resolves and admits the claims of TxAll, in order: an empty
// map or resource is [token.ErrNoResource], a zero token is the one ctx
// carries for that very resource ([enforce.Resolve]), and every token
// passes the check before anything is sent. The first refusal in order is
// returned.
func resolveAll(ctx context.Context, check token.Check, m map[string]token.Token) (claims, error) {
	switch {
	case len(m) == 0:
		return nil, fmt.Errorf("%w: fenced transaction on no resources: %w", ErrBadInput, token.ErrNoResource)
	case len(m) > maxClaims:
		return nil, fmt.Errorf("%w: fenced transaction on %d resources, more than the %d one statement can claim", ErrBadInput, len(m), maxClaims)
	}
	c := make(claims, 0, len(m))
	for r, t := range m {
		c = append(c, claim{resource: r, t: t})
	}
	slices.SortFunc(c, func(a, b claim) int { return strings.Compare(a.resource, b.resource) })
	for i := range c {
		r, t := c[i].resource, c[i].t
		if r == "" {
			return nil, fmt.Errorf("postgres: fenced transaction: %w", token.ErrNoResource)
		}
		if err := lockMismatch(ctx, fmt.Sprintf("fenced transaction on %q", r), r, t, txHint); err != nil {
			return nil, err
		}
		t, err := enforce.Resolve(ctx, r, t)
		if err != nil {
			return nil, fmt.Errorf("postgres: %w", err)
		}
		v, err := admit(ctx, check, r, t)
		if err != nil {
			return nil, err
		}
		c[i].t, c[i].v = t, v
	}
	return c, nil
}

// claimArgs returns the arguments of one of k's claim statements for c
// (claimText), followed by extra: the resource and its token for one,
// each resource and its token in order for several.
func claimArgs(c claims, extra ...any) []any {
	if len(c) == 1 {
		return append([]any{c[0].resource, c[0].v}, extra...)
	}
	args := make([]any, 0, 2*len(c)+len(extra))
	for _, x := range c {
		args = append(args, x.resource, x.v)
	}
	return append(args, extra...)
}

// claimText returns the text of the claim statement of kind for c: k's
// statement for one resource, or the one for len(c) resources.
func (k *Tokens) claimText(kind claimKind, c claims) string {
	if len(c) > 1 {
		return k.allSQL(kind, len(c))
	}
	switch kind {
	case claimTx:
		return k.txClaimSQL
	case claimOrFail:
		return k.claimOrFailSQL
	}
	return k.claimSQL
}

// scanClaim reads the answer of a plain or tx claim statement
// (claimText): whether every resource was claimed and, if not, which one
// in order was refused first (i) and its mark as of the statement's
// snapshot. rest receives the columns after those.
func scanClaim(row pgx.Row, c claims, rest ...any) (claimed bool, i int, snap *int64, err error) {
	if len(c) == 1 {
		return claimed, 0, snap, row.Scan(append([]any{&claimed, &snap}, rest...)...)
	}
	var idx *int64
	err = row.Scan(append([]any{&claimed, &idx, &snap}, rest...)...)
	if idx != nil {
		i = int(*idx)
	}
	return claimed, i, snap, err
}

// marks reads the current marks of c's resources (a resource without a
// row has the floor of pruned marks), with a fresh snapshot.
func (k *Tokens) marks(ctx context.Context, q querier, c claims) ([]token.Token, error) {
	if len(c) == 1 {
		cur, _, err := k.highWater(ctx, q, c[0].resource)
		return []token.Token{cur}, err
	}
	var marks []*int64
	var floor *int64
	if err := q.QueryRow(ctx, k.marksSQL, c.resources()).Scan(&marks, &floor); err != nil {
		return nil, k.wrapErr("read high-water of", err)
	}
	if len(marks) != len(c) {
		return nil, fmt.Errorf("postgres: read high-water of %s: %d marks for %d resources", c.name(), len(marks), len(c))
	}
	out := make([]token.Token, len(c))
	for i, m := range marks {
		if m != nil {
			out[i] = token.Token(*m)
		} else {
			out[i] = floorValue(deref(floor))
		}
	}
	return out, nil
}

// refused interprets a refused claim of c: c[i] is the first resource in
// order that the claim did not advance, snap its mark as of the claim's
// snapshot. done is false when the claim must be retried.
//
// Under READ COMMITTED the refusal and the snapshot read can disagree: the
// upsert was refused by a row version committed after the statement's
// snapshot, which the read does not see. A StaleError must never report a
// current mark at or below the presented token, so a second statement,
// with a fresh snapshot, reads the marks again, and the first resource in
// order whose mark is above its token is the refused one. If none is, a
// row was deleted or lowered in between, and the claim is retried.
func (k *Tokens) refused(ctx context.Context, q querier, c claims, i int, snap *int64) (done bool, err error) {
	if snap != nil && i < len(c) && token.Token(*snap) > c[i].t {
		return true, c.stale(i, token.Token(*snap))
	}
	cur, err := k.marks(ctx, q, c)
	if err != nil {
		return true, err
	}
	for j := range c {
		if cur[j] > c[j].t {
			return true, c.stale(j, cur[j])
		}
	}
	return false, nil
}

// floorStale interprets the floor's trigger refusing a new mark below the
// floor of pruned marks (a Prune committed while the claim ran): for one
// resource that is its refusal; of several, the refused ones are those
// whose marks a fresh read on q finds above their tokens (see refused).
func (k *Tokens) floorStale(ctx context.Context, q querier, c claims, floor token.Token) (done bool, err error) {
	if len(c) == 1 {
		if floor > c[0].t {
			return true, c.stale(0, floor)
		}
		return false, nil
	}
	return k.refused(ctx, q, c, len(c), nil)
}

// errNoRefusal reports a claim refused while no mark was found above its
// token, again and again.
func (k *Tokens) errNoRefusal(c claims) error {
	return fmt.Errorf("postgres: claim %s in %s: the mark kept changing under %d attempts", c.name(), k.name, maxAttempts)
}
