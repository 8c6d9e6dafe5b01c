package grpcmw

import (
	"context"

	"github.com/fenceguard/fenceguard/token"
)

// ClaimInStore is the [Options.Fence] for a handler whose store enforces
// the token itself, in the same statement or critical section as the
// access — storage/postgres's column mode, a store's own per-item marks.
// The interceptor then reads the metadata, runs [Options.Check] and passes
// the token on in the handler's context, but claims nothing: the store's
// claim is the one that counts. That costs one claim per call instead of
// two (one commit on PostgreSQL, not two), and a mark moves only on an
// access that happens — not on a call the handler refuses for a bad
// message or an unknown resource, which would otherwise leave a mark (and
// state) behind. The handler answers the store's refusals with [Error],
// which also reports them to [Options.Observe] and [Options.Log]: with
// ClaimInStore a call is observed once the store has decided, not when
// the interceptor lets it through.
//
// It is only as strong as the store: every access the handler makes must
// go through the store's fenced operations with the context's token. With
// a store that does not check tokens, ClaimInStore fences nothing.
var ClaimInStore token.Fence = claimInStore{}

type claimInStore struct{}

func (claimInStore) Claim(context.Context, string, token.Token) error { return nil }
