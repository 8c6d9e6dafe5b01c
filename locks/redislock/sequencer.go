package redislock

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock/internal/ctxerr"
	"github.com/fenceguard/fenceguard/token"
)

// Sequencer is the [token.Sequencer] of redislock's locks: a resource asks
// it which token a lock stands at, to refuse tokens above the current
// holder's ([token.SequencerCheck]). It needs only a client — a resource
// need not run a [Locker] — and holds nothing to close. It is safe for
// concurrent use.
//
// [Sequencer.Current] answers, in one round trip (one script on the lock's
// node):
//
//   - while the lock is held, the token of the grant that holds it — the
//     lock's value carries it;
//   - while it is free, the key's token counter, or the clock floor when
//     that is larger: the server clock in µs plus the key's heal offset d
//     (0 unless [Locker.Heal] raised the counter above the clock), at most
//     [MaxToken]. That is at least every token granted so far (the counter
//     is the last one minted; a counter that was lost or expired was at
//     most the floor when it was written) and at most the next grant's,
//     which is max(counter + 1, floor).
//
// Waiters have no token until a release hands them the lock (it mints the
// token then), so a resource that refuses tokens above the answer refuses
// every token that was not granted yet: a forger can at most act as the
// current holder, never lock out the queue.
//
// # Why answers never decrease
//
// On one Redis node the answers for a key form a sequence that does not go
// down, on the same assumption as the tokens themselves (see "What the
// token guarantees" in the package doc):
//
//   - held, then handed over or granted again: the next grant's token is
//     max(counter + 1, floor), above the counter, which is at least the
//     previous holder's token;
//   - held, then free (released, or expired): the counter is still at
//     least the last holder's token, and the floor only grows (the clock
//     does, and the offset never decreases);
//   - free, then held: the grant's token is max(counter + 1, floor) at a
//     later instant, at least the earlier max(counter, floor);
//   - the counter lost (restart without persistence, FLUSHALL, CounterIdle
//     expiry) or healed: the answer is at least the floor, and every token
//     minted from the floor is below a later reading of it; a heal only
//     raises the counter and the offset.
//
// What breaks it is what breaks the tokens: a counter and offset that ran
// ahead of the clock (by [Locker.Heal]) lost while the clock is still
// behind them, a
// server clock stepped back, or a failover to a replica that had not
// received the last grants (it can bring back an older holder's lock
// value, and so an older holder's token, until that grant ends).
// [token.SequencerCheck] caches the largest answer it has seen, so such a
// dip only refuses tokens it had not admitted before.
//
// # The master only
//
// Give it a client of the master: a [*redis.Client] on the master's
// address, a Sentinel failover client (not ReplicaOnly), or a
// [*redis.ClusterClient] (it sends scripts to masters). A replica's copy
// lags: while the grant has not reached it, a replica sees the lock free
// and would answer its clock, above the holder's token, and a forged token
// in between would pass the check and lock the holder out. So the
// Sequencer never answers from a replica: its script starts with a
// "#!lua" shebang without the no-writes flag, which Redis 7 treats as a
// script that may write and refuses on a read-only replica (READONLY)
// before it runs. Current then fails with an error wrapping
// [ErrReplica], and [token.SequencerCheck] refuses the claim. This needs
// Redis 7.0 or later; Redis 6.2 does not know the shebang and fails the
// script (a compile error), so the Sequencer fails safe there and answers
// nothing. A replica with replica-read-only no is not refused (Redis runs
// any script there): do not point a Sequencer at one. The same shebang
// makes Redis apply its rules for writing scripts: on a master short of
// min-replicas-to-write, or over maxmemory with noeviction, Current fails
// (NOREPLICAS, OOM) rather than answer.
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
// read-only replica with READONLY (see "The master only" in [Sequencer]).
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
	return current(ctx, s.client, s.prefix, key)
}

func current(ctx context.Context, c redis.Scripter, prefix, key string) (token.Token, error) {
	if key == "" {
		return 0, fmt.Errorf("%w: current: empty key", locks.ErrInvalidArgument)
	}
	if c == nil {
		return 0, fmt.Errorf("%w: current %q: nil client", locks.ErrInvalidArgument, key)
	}
	if err := checkSlot(c, prefix, key); err != nil {
		return 0, err
	}
	s, err := currentScript.Run(ctx, c, keysFor(prefix, key).bound()).Text()
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
