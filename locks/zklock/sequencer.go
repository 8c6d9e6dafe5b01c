package zklock

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/token"
)

// SequencerConn is what a [Sequencer] needs of a ZooKeeper connection;
// *zk.Conn satisfies it.
type SequencerConn interface {
	Sync(path string) (string, error)
	Children(path string) ([]string, *zk.Stat, error)
	Exists(path string) (bool, *zk.Stat, error)
}

// Sequencer is the [token.Sequencer] of the locks a [Locker] with the same
// prefix grants: give it to [token.SequencerCheck] so that a resource
// refuses every token above the current holder's. It reads and never
// writes, holds nothing to close, and is safe for concurrent use (as its
// connection is).
//
// Current, after a sync of the key's znode:
//
//   - the Czxid of the key's first child in queue order — the znode of
//     the current grant, whose Czxid is its holder's token — when the key
//     has children;
//   - else the Pzxid of the key's znode: the zxid of its last child's
//     create or delete, so at least every token granted there and below
//     every later create, the next grant's included;
//   - else (the key's znode is gone: never used, or removed while idle)
//     the Pzxid of the prefix, which the key's znode's removal raised to
//     above every token granted under it, and which is below the zxid that
//     creates it again;
//   - else 0 (no lock was ever taken under the prefix): every token is
//     refused.
//
// A waiter's znode is never first while the holder's is there: the queue
// is ordered by sequence number (across its wrap, as the Locker orders
// it), which follows creation order, so waiters' tokens — and the bound
// [Locker.Issued] returns, the key's Pzxid, at least the newest waiter's —
// are above Current until their turn comes.
//
// # Never decreasing
//
// Over successive answers on one connection: the first child's Czxid only
// rises (a new first child was created after the one it replaces, and
// zxids follow creation); a Pzxid only rises, is at least the Czxid of
// every child created before it was read, and is below the Czxid of every
// child created after; and the key's znode, removed and re-created, comes
// back with a Pzxid above the prefix's at the removal. A session's reads
// never go back in time, across reconnects to other members too (the
// client hands its last zxid to the server it connects to). Across
// connections, [token.SequencerCheck]'s cache keeps the answers it uses
// from decreasing.
//
// # Read consistency
//
// The reads are served by the session's member; the sync before them
// makes that member catch up with the leader first. ZooKeeper's sync is
// not a quorum operation (see [Fence]): a deposed leader that does not
// know it yet can let one through that misses its successor's writes.
// The answer is then an older state's, which is only ever lower: the
// current holder's token may be refused for a moment (the check fails
// closed), a token above it is never admitted.
type Sequencer struct {
	c      SequencerConn
	prefix string
}

var _ token.Sequencer = (*Sequencer)(nil)

// NewSequencer returns the Sequencer of the locks granted under prefix —
// the Locker's Options.Prefix; "" is its default, "/fenceguard/lock".
func NewSequencer(c SequencerConn, prefix string) *Sequencer {
	if prefix == "" {
		prefix = "/fenceguard/lock"
	}
	return &Sequencer{c: c, prefix: strings.TrimSuffix(prefix, "/")}
}

// Current implements [token.Sequencer]. An empty key fails with
// [locks.ErrInvalidArgument]; connection and server errors come back wrapped (the
// sequencer check then refuses: it fails closed). When ctx ends first,
// Current returns ctx's error and the reads in flight finish in the
// background.
func (s *Sequencer) Current(ctx context.Context, key string) (token.Token, error) {
	if key == "" {
		return 0, fmt.Errorf("%w: empty key", locks.ErrInvalidArgument)
	}
	dir := s.prefix + "/" + escape(key)
	var cur token.Token
	err := fenceCall(ctx, func() error {
		if _, err := s.c.Sync(dir); err != nil {
			return fmt.Errorf("sync: %w", err)
		}
		for ctx.Err() == nil {
			children, st, err := s.c.Children(dir)
			if errors.Is(err, zk.ErrNoNode) {
				ok, pst, err := s.c.Exists(s.prefix)
				if err == nil && ok {
					cur = token.Token(pst.Pzxid)
				}
				return err
			}
			if err != nil {
				return err
			}
			first, ok := queueHead(children)
			if !ok {
				cur = token.Token(st.Pzxid)
				return nil
			}
			ok, hst, err := s.c.Exists(dir + "/" + first)
			if err != nil {
				return err
			}
			if ok {
				cur = token.Token(hst.Czxid)
				return nil
			}
			// Released between the listing and the look: list again.
		}
		return ctx.Err()
	})
	if err != nil {
		return 0, fmt.Errorf("zklock: sequencer %q: %w", key, err)
	}
	return cur, nil
}

// queueHead returns the first of a key's children in queue order (the holder's
// znode), with the order [predecessor] uses; false when there is none.
func queueHead(children []string) (string, bool) {
	var first string
	var lowest int32
	for _, c := range children {
		q, ok := seq(c)
		if !ok {
			continue
		}
		if first == "" || before(q, lowest) {
			first, lowest = c, q
		}
	}
	return first, first != ""
}
