package etcdlock

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/token"
)

// Sequencer is the [token.Sequencer] of etcdlock's locks: it tells a
// resource the token of the current grant of a lock, so that
// [token.SequencerCheck] can refuse every token the lock has not reached.
// It holds no lease, no watch and no goroutine: there is nothing to close.
// It is safe for concurrent use.
type Sequencer struct {
	kv     clientv3.KV
	prefix string
}

var _ token.Sequencer = (*Sequencer)(nil)

// NewSequencer returns the Sequencer of the locks a [Locker] keeps in kv
// under prefix. Pass the Locker's Options.Prefix; "" means the same default
// as the Locker's ("/fenceguard/lock/"), so a Locker and a Sequencer that
// both leave the prefix unset agree. A prefix no Locker uses reads an empty
// queue and so answers the cluster's revision: it then bounds nothing
// better than [Locker.Issued].
func NewSequencer(kv clientv3.KV, prefix string) *Sequencer {
	if prefix == "" {
		prefix = defaultPrefix
	}
	return &Sequencer{kv: kv, prefix: prefix}
}

// Current implements [token.Sequencer] with one linearizable read of the
// lock's queue (etcd's default read: served after the member caught up
// with the leader's commit index, so it sees every grant and release
// acknowledged before it started):
//
//   - the lowest create revision among the queue's keys, when there is
//     one: that key is the holder's (a waiter's key is always younger than
//     the holder's), and its create revision is the holder's token;
//   - when nobody queues, the revision of the read (the response header's):
//     every grant so far wrote its key at or below it, and every later
//     grant writes above it.
//
// Never decreasing: keys only leave the queue (deleted) or join it above
// the current revision, so while the queue is not empty its lowest create
// revision can only move up; a holder's key was written at or below any
// revision at which it is gone, so an empty queue answers at least the
// last holder's token; a key that is in the queue after an empty read was
// written after it, so above its revision; and linearizable reads see
// revisions that never go back, through any member.
//
// A holder whose lease expired while it was paused may still present its
// token: it is below Current, so the check admits it and the [Fence]
// refuses it as stale once a newer holder has claimed — the check bounds
// forgeries, staleness is the fence's.
func (s *Sequencer) Current(ctx context.Context, key string) (token.Token, error) {
	if key == "" {
		return 0, fmt.Errorf("etcdlock: current: %w: empty key", locks.ErrInvalidArgument)
	}
	resp, err := s.kv.Get(ctx, queuePrefix(s.prefix, key), append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())...)
	if err != nil {
		return 0, fmt.Errorf("etcdlock: current %q: %w", key, err)
	}
	if len(resp.Kvs) > 0 {
		return token.Token(resp.Kvs[0].CreateRevision), nil
	}
	return token.Token(resp.Header.Revision), nil
}
