package redislock

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock/internal/ctxerr"
	"github.com/fenceguard/fenceguard/locks/redislock/internal/detach"
	"github.com/fenceguard/fenceguard/token"
)

// Sequencer is the [token.Sequencer] of redislock's locks: a resource asks
// it which token a lock stands at, to refuse tokens above the current
// holder's ([token.SequencerCheck]). It needs only a client — a resource
// need not run a [Locker] — and holds nothing to close. It is safe for
// concurrent use.
//
// [Sequencer.Current] answers, in one round trip: while the lock is held,
// the holder's token; while it is free, the key's counter or the clock
// floor (server clock in µs plus the heal offset), whichever is larger —
// at least every token granted and at most the next. Waiters have no token
// until a release hands them the lock, so the check refuses every token
// not granted yet. The answers for a key do not decrease, on the tokens'
// assumptions (see the package doc); a failover to a replica that had not
// received the last grants can bring an answer back down until that grant
// ends, and the check's cache then only refuses.
//
// Give it a client of the master: a [*redis.Client] on the master's
// address, a Sentinel failover client (not ReplicaOnly), or a
// [*redis.ClusterClient]. Its script is refused on a read-only replica
// (Current fails with [ErrReplica]) and needs Redis 7.0 or later; on 6.2
// it answers nothing. Never point it at a replica with replica-read-only
// no. On a master short of min-replicas-to-write, or over maxmemory with
// noeviction, Current fails rather than answer.
type Sequencer struct {
	client redis.Scripter
	prefix string
}

var _ token.Sequencer = (*Sequencer)(nil)

// ErrReplica is wrapped by the error of [Sequencer.Current] (and
// [Locker.Current]) when its client reached a read-only replica, which
// refuses the script: a replica's copy may lag the master's, and an answer
// from it could let a forged token through. Give the Sequencer a client of
// the master.
var ErrReplica = errors.New("redislock: the sequencer's client reached a read-only replica (give it a client of the master)")

// masterOnly starts the Sequencer's script: a shebang without the
// no-writes flag, so Redis (7.0 and later) refuses the script on a
// read-only replica with READONLY (see [Sequencer]).
const masterOnly = "#!lua\n"

// NewSequencer returns a Sequencer for the locks a [Locker] with the same
// prefix ([Options.Prefix]; empty: [DefaultPrefix]) keeps on client's
// deployment.
func NewSequencer(client redis.Scripter, prefix string) *Sequencer {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if _, ok := client.(stateReloader); ok {
		client = reloadingScripter{client}
	}
	return &Sequencer{client: client, prefix: prefix}
}

// Current implements [token.Sequencer]. It fails with [locks.ErrInvalidArgument]
// for an empty key, with an error wrapping [ErrReplica] when the client
// reached a read-only replica; network and server errors are returned
// wrapped (and [token.SequencerCheck] then refuses the claim).
func (s *Sequencer) Current(ctx context.Context, key string) (token.Token, error) {
	return current(ctx, nil, s.client, s.prefix, key)
}

// current runs the Sequencer's script; a command a cancel cut short
// finishes in the background, counted in bg (nil: not counted).
func current(ctx context.Context, bg *detach.Group, c redis.Scripter, prefix, key string) (token.Token, error) {
	if key == "" {
		return 0, fmt.Errorf("%w: current: empty key", locks.ErrInvalidArgument)
	}
	if c == nil {
		return 0, fmt.Errorf("%w: current %q: nil client", locks.ErrInvalidArgument, key)
	}
	if err := checkSlot(c, prefix, key); err != nil {
		return 0, err
	}
	s, err := detach.Call(bg, ctx, func() (string, error) {
		return currentScript.Run(ctx, c, keysFor(prefix, key).bound()).Text()
	})
	if err != nil {
		if strings.HasPrefix(err.Error(), "READONLY ") {
			return 0, fmt.Errorf("redislock: current %q: %w: %w", key, ErrReplica, err)
		}
		return 0, fmt.Errorf("redislock: current %q: %w", key, ctxerr.Wrap(ctx, scriptErr(err)))
	}
	t, err := token.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("redislock: current %q: %w", key, err)
	}
	return t, nil
}
