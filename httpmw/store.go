package httpmw

import (
	"context"

	"github.com/fenceguard/fenceguard/token"
)

// ClaimInStore is the [Options.Fence] for a handler whose store enforces
// the token itself, in the same statement or critical section as the
// access — storage/postgres's column mode, a store's own per-item marks.
// The middleware then parses the header, runs [Options.Check] and passes
// the token on in the request's context, but claims nothing: the store's
// claim is the one that counts. That costs one claim per request instead
// of two (one commit on PostgreSQL, not two), and a mark moves only on an
// access that happens — not on a request the handler refuses for a bad
// body or an unknown resource, which would otherwise leave a mark (and
// state) behind.
//
// It is only as strong as the store: every access the handler makes must
// go through the store's fenced operations with the context's token. With
// a store that does not check tokens, ClaimInStore fences nothing.
var ClaimInStore token.Fence = claimInStore{}

type claimInStore struct{}

func (claimInStore) Claim(context.Context, string, token.Token) error { return nil }
