package redlock

import (
	"context"
	"errors"
	"time"

	"github.com/fenceguard/fenceguard/locks/redislock/internal/ctxerr"
	"github.com/fenceguard/fenceguard/token"
)

// attempt is the bookkeeping of one try at a quorum: which nodes granted
// their lock, what counters they reported, which acknowledged the token's
// write-back. It holds no I/O, so a simulation can drive it through
// interleavings exactly as the Locker drives it through real nodes.
type attempt struct {
	n, quorum int
	held      []bool
	counters  []token.Token
	refused   int            // nodes held by another grant
	holders   map[string]int // those grants, and how many nodes each holds
	errs      []error        // nodes that failed to answer
	wait      time.Duration  // shortest remaining TTL among refusing nodes
	tok       token.Token
	wrote     int
}

func newAttempt(n int) *attempt {
	return &attempt{n: n, quorum: n/2 + 1, held: make([]bool, n), counters: make([]token.Token, n)}
}

// acquired records node i's answer to the acquire script; holder is the
// grant holding the node when it refused.
func (a *attempt) acquired(i int, ok bool, counter token.Token, pttl time.Duration, holder string, err error) {
	switch {
	case err != nil:
		a.errs = append(a.errs, err)
	case ok:
		a.held[i], a.counters[i] = true, counter
	default:
		a.refused++
		if a.holders == nil {
			a.holders = map[string]int{}
		}
		a.holders[holder]++
		if pttl > 0 && (a.wait == 0 || pttl < a.wait) {
			a.wait = pttl
		}
	}
}

// taken reports whether another grant holds a quorum of the nodes: the
// lock is held, not merely contended.
func (a *attempt) taken() bool {
	for _, n := range a.holders {
		if n >= a.quorum {
			return true
		}
	}
	return false
}

// heldCount is how many nodes' locks this attempt holds.
func (a *attempt) heldCount() int {
	n := 0
	for _, h := range a.held {
		if h {
			n++
		}
	}
	return n
}

// mint decides the token once every node answered: the largest counter
// among the nodes won, plus one — in uint64, exact. It fails without a
// quorum (ok false), and with a [*token.RangeError] when that largest
// counter is at the ceiling, [token.MaxInt64]: no token above it is ever
// granted, and none is repeated.
func (a *attempt) mint() (tok token.Token, ok bool, err error) {
	if a.heldCount() < a.quorum {
		return 0, false, nil
	}
	var top token.Token
	for i, h := range a.held {
		if h {
			top = max(top, a.counters[i])
		}
	}
	if top >= token.MaxInt64 {
		return 0, false, &token.RangeError{What: "redlock counter", Token: top + 1, Max: token.MaxInt64}
	}
	a.tok = top + 1
	return a.tok, true, nil
}

// wroteBack records node i's answer to the token's write-back.
func (a *attempt) wroteBack(i int, ok bool, err error) {
	switch {
	case err != nil:
		a.errs = append(a.errs, err)
	case ok:
		a.wrote++
	default:
		a.held[i] = false // the node's lock expired or was lost meanwhile
	}
}

// granted reports whether a majority acknowledged the write-back: only
// then may the token be handed out.
func (a *attempt) granted() bool { return a.wrote >= a.quorum }

// unreachable reports whether too many nodes failed to answer for any
// quorum to be possible, and says so.
func (a *attempt) unreachable(ctx context.Context) error {
	if len(a.errs) <= a.n-a.quorum {
		return nil
	}
	return a.quorumErr(ctx, len(a.errs))
}

// quorumErr is the [*QuorumError] of an attempt on which failed nodes did
// not answer, with ctx's error added when ctx is what cut it short
// ([ctxerr.Wrap]).
func (a *attempt) quorumErr(ctx context.Context, failed int) error {
	return ctxerr.Wrap(ctx, &QuorumError{Need: a.quorum, Nodes: a.n, Failed: failed, Err: errors.Join(a.errs...)})
}
