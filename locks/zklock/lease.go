package zklock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/token"
)

// abandonWait bounds how long a failed or cancelled acquire waits for its
// znode's deletion before returning; the deletion goes on in the background
// after that. Later requests of the same session queue behind it anyway.
const abandonWait = 50 * time.Millisecond

// abandon deletes the attempt's znode.
func (a *attempt) abandon(n node) {
	done := make(chan struct{})
	path := a.dir + "/" + n.name
	if !a.l.spawn(func() {
		defer close(done)
		a.s.removeNode(path, n.owner)
	}) {
		return // closed: the session and its znodes are gone
	}
	t := time.NewTimer(abandonWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// grant turns the attempt's znode, found first in the queue by a request
// sent at from in epoch e, into a lease; nil if the epoch has ended since.
func (a *attempt) grant(n node, from time.Time, e uint64) *Lease {
	le := &Lease{
		s:     a.s,
		key:   a.key,
		path:  a.dir + "/" + n.name,
		czxid: n.czxid,
		owner: n.owner,
		ttl:   a.ttl,
		done:  make(chan struct{}),
	}
	if !a.s.register(le, e) {
		return nil
	}
	le.mu.Lock()
	defer le.mu.Unlock()
	le.deadline = from.Add(a.ttl)
	le.timer = time.AfterFunc(time.Until(le.deadline), le.lapse)
	return le
}

// grantFresh grants when the session answered a request in epoch e
// recently: the lease is then dated from that request. ZooKeeper counts a
// session's timeout from the last packet it received, so the session lives
// at least until then plus its timeout, which is no less than the TTL.
func (a *attempt) grantFresh(n node, e uint64) *Lease {
	from, ok := a.fresh(e)
	if !ok {
		return nil
	}
	return a.grant(n, from, e)
}

// fresh returns the send time of the latest request the session answered
// through the leader in epoch e, if that was at most TTL/8 ago: what
// grantFresh dates a lease from.
func (a *attempt) fresh(e uint64) (time.Time, bool) {
	s := a.s
	s.mu.Lock()
	from, ok := s.lastGood, s.up && s.epoch == e && !s.lastGood.IsZero()
	s.mu.Unlock()
	return from, ok && time.Since(from) <= a.ttl/8
}

// Lease is a zklock grant: an ephemeral sequential znode that was first in
// its key's queue. It implements [locks.Lease].
type Lease struct {
	s     *session
	key   string
	path  string
	czxid int64
	owner int64 // the session that created the znode
	ttl   time.Duration
	done  chan struct{}

	op sync.Mutex // serializes Renew and Release

	mu        sync.Mutex
	state     leaseState  // guarded by mu
	why       error       // guarded by mu; why the lease was lost
	deadline  time.Time   // guarded by mu
	timer     *time.Timer // guarded by mu; fires at the deadline
	cleaned   bool        // guarded by mu; the znode is gone or its deletion started
	uncertain bool        // guarded by mu; a delete was sent and its reply lost
}

type leaseState int

const (
	held leaseState = iota
	lost
	released
)

var (
	_ locks.Lease        = (*Lease)(nil)
	_ locks.LossNotifier = (*Lease)(nil)
)

// Key implements [locks.Lease].
func (le *Lease) Key() string { return le.key }

// Token implements [locks.Lease]: the Czxid of the grant's znode.
func (le *Lease) Token() token.Token { return token.Token(le.czxid) }

// TTL implements [locks.Lease].
func (le *Lease) TTL() time.Duration { return le.ttl }

// Deadline implements [locks.Lease]: the send time of the last request that
// showed the grant held through the leader (the create, a listing after a
// sync, or Renew's sync and Exists), plus the TTL — the send time, not the
// answer's. The session's timeout is at least the TTL and is counted from
// a packet sent no earlier, so the server cannot expire the session, and
// with it the znode, before then; on an ensemble, see docs/design.md
// ("zklock") for the margin by which the leader's view of a follower's
// sessions lags.
func (le *Lease) Deadline() time.Time {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.deadline
}

// Path is the grant's znode.
func (le *Lease) Path() string { return le.path }

// Lost implements [locks.LossNotifier]. It is closed when the lease ends:
// released, not renewed by its deadline, its session's connection lost or
// the session expired, or the locker closed. It is closed at once when the
// session reports the loss, before any Renew would notice, so a guard
// cancels its lease context then, not at its next renewal.
func (le *Lease) Lost() <-chan struct{} { return le.done }

// lose ends a held lease. cleaned says the znode needs no deletion: the
// lease is then done with its session too.
func (le *Lease) lose(why error, cleaned bool) {
	if cleaned {
		defer le.s.unregister(le) // after le.mu: the session's lock is never taken inside it
	}
	le.mu.Lock()
	defer le.mu.Unlock()
	if cleaned {
		le.cleaned = true
		if le.timer != nil {
			le.timer.Stop()
		}
	}
	if le.state != held {
		return
	}
	le.state, le.why = lost, why
	close(le.done)
}

// lapse runs at the deadline. A lease nobody renewed ends here even while its
// session lives on, as the TTL promises, and its znode is deleted — the
// lock-delay later: until then the znode keeps the lock from the next
// waiter, and lapse runs again to delete it. It also removes the znode of
// a lease lost to a broken connection whose session survived, if no
// Release did it first.
func (le *Lease) lapse() {
	le.mu.Lock()
	if le.state == held {
		if d := time.Until(le.deadline); d > 0 { // renewed while this was due
			le.timer.Reset(d)
			le.mu.Unlock()
			return
		}
		le.state, le.why = lost, errLapsed
		close(le.done)
	}
	if le.state == lost && !le.cleaned {
		if d := time.Until(le.deadline.Add(le.s.l.o.LockDelay)); d > 0 {
			le.timer.Reset(d)
			le.mu.Unlock()
			return
		}
	}
	clean := le.state == lost && !le.cleaned
	le.cleaned = true
	le.mu.Unlock()
	le.s.unregister(le)
	if clean {
		le.s.l.spawn(func() { le.s.removeNode(le.path, le.owner) })
	}
}

// renewSkipsSync makes Renew an Exists alone, as it was: for the control
// runs of the tests only (export_test.go).
var renewSkipsSync atomic.Bool

func (le *Lease) notHeld(op string, why error) error {
	return fmt.Errorf("zklock: %s %q (token %d): %w: %w", op, le.key, le.czxid, locks.ErrNotHeld, why)
}

// Renew implements [locks.Lease]. The session itself is kept alive by
// go-zookeeper's pings; Renew checks that it has not been interrupted since
// the grant and that the znode is still there with this grant's Czxid, and
// moves the deadline to the send time of its request plus the TTL. The
// request is a sync, which the member passes to the leader, then an Exists
// the member answers after the sync: so a renewal succeeds only when the
// leader still had the session after the request was sent, never on a
// member's stale copy. A renewal whose
// member cannot reach the leader waits for it: it fails when ctx ends
// (the deadline stays where it was) or when the member drops the
// connection (the lease is lost). It fails with [locks.ErrNotHeld] at once,
// without a request, once the session reported a lost connection.
func (le *Lease) Renew(ctx context.Context) error {
	le.op.Lock()
	defer le.op.Unlock()
	le.mu.Lock()
	state, why := le.state, le.why
	le.mu.Unlock()
	switch state {
	case released:
		return le.notHeld("renew", errors.New("released"))
	case lost:
		return le.notHeld("renew", why)
	}
	s := le.s
	v := s.view()
	if !v.up || v.id != le.owner {
		// A session event is on its way or has lost the lease already.
		le.lose(errDisconnected, false)
		return le.notHeld("renew", errDisconnected)
	}
	sent := time.Now()
	st, err := call(ctx, s.l, func() (*zk.Stat, error) {
		// The sync goes through the leader, which checks the session: a
		// member cut off from the quorum answers reads from its frozen
		// copy (an Exists alone succeeds there for as long as it takes the
		// member to notice, seconds after the leader expired the session
		// and granted the lock to another), but holds the sync until it
		// hears from the leader — and drops its clients first when it
		// does not, or applies the session's closing before the sync.
		if !renewSkipsSync.Load() {
			if _, err := s.conn.Sync(le.path); err != nil {
				return nil, err
			}
		}
		ok, st, err := s.conn.Exists(le.path)
		if err == nil && !ok {
			err = zk.ErrNoNode
		}
		return st, err
	}, nil, 0)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		le.lose(errGone, true)
		return le.notHeld("renew", errGone)
	case transient(err):
		le.lose(errDisconnected, false)
		return le.notHeld("renew", errDisconnected)
	case err != nil:
		return fmt.Errorf("zklock: renew %q: %w", le.key, err)
	case st.Czxid != le.czxid || st.EphemeralOwner != le.owner:
		le.lose(errGone, true) // not ours: never delete it
		return le.notHeld("renew", errGone)
	case !s.answered(v.epoch, sent):
		le.lose(errDisconnected, false)
		return le.notHeld("renew", errDisconnected)
	}
	le.mu.Lock()
	defer le.mu.Unlock()
	if le.state != held { // lost while the request was out
		return le.notHeld("renew", le.why)
	}
	le.deadline = sent.Add(le.ttl)
	left := time.Until(le.deadline)
	le.timer.Reset(left) // at once when the request took the whole TTL
	if left <= 0 {
		return le.notHeld("renew", errLapsed)
	}
	return nil
}

// Release implements [locks.Lease]: it deletes the grant's znode. The name
// has a random part of its own, so it can only ever be this grant's znode; a
// late or retried release cannot delete a newer grant. A lease that was lost
// while its session survived (a connection that broke and came back) still
// has its znode: Release deletes it in the background, so the next waiter
// need not wait for the deadline (plus the lock-delay), and reports
// [locks.ErrNotHeld]. The deletion needs the session's connection: a
// [Locker.Close] right after it, before the connection is back, can leave
// the znode to the session's expiry.
func (le *Lease) Release(ctx context.Context) error {
	le.op.Lock()
	defer le.op.Unlock()
	return le.release(ctx)
}

// release is Release with le.op held.
func (le *Lease) release(ctx context.Context) error {
	le.mu.Lock()
	switch le.state {
	case released:
		le.mu.Unlock()
		return nil
	case lost:
		why, clean := le.why, !le.cleaned
		le.cleaned = true
		le.timer.Stop()
		le.mu.Unlock()
		if clean {
			le.s.unregister(le)
			le.s.l.spawn(func() { le.s.removeNode(le.path, le.owner) })
		}
		return le.notHeld("release", why)
	}
	uncertain := le.uncertain
	le.mu.Unlock()
	s := le.s
	if v := s.view(); !v.up || v.id != le.owner {
		le.lose(errDisconnected, false)
		return le.release(ctx)
	}
	// From here the znode may be gone whatever the reply says: a lost
	// reply or an abandoned call makes a later NoNode this delete's doing.
	le.mu.Lock()
	le.uncertain = true
	le.mu.Unlock()
	_, err := call(ctx, s.l, func() (struct{}, error) { return struct{}{}, s.conn.Delete(le.path, -1) }, nil, 0)
	switch {
	case err == nil || (errors.Is(err, zk.ErrNoNode) && uncertain):
		// (An earlier delete whose reply was lost did it.)
		le.mu.Lock()
		if le.state == held {
			close(le.done)
		}
		le.state, le.cleaned = released, true
		le.timer.Stop()
		le.mu.Unlock()
		s.unregister(le)
		return nil
	case errors.Is(err, zk.ErrNoNode):
		le.lose(errGone, true)
		return le.notHeld("release", errGone)
	case ctx.Err() != nil:
		// The delete goes on without us: the grant can no longer be known
		// held, so the lease ends now (Done, Lost). The deadline, or
		// another Release, removes the znode should the delete not land.
		le.lose(fmt.Errorf("release abandoned: %w", ctx.Err()), false)
	}
	return fmt.Errorf("zklock: release %q: %w", le.key, err)
}
