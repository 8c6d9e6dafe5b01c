package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/etcdlock/internal/cleanup"
	"github.com/fenceguard/fenceguard/token"
)

// Client is what the locker needs of an etcd client; *clientv3.Client
// satisfies it.
type Client interface {
	clientv3.KV
	clientv3.Lease
	clientv3.Watcher
}

// MinTTL is the shortest lease etcdlock asks for. etcd counts lease TTLs in
// whole seconds (a TTL is rounded up) and silently raises TTLs below its
// minimum (1.5 election timeouts, 2s with default settings).
const MinTTL = time.Second

const defaultPrefix = "/fenceguard/lock/"

// errClosed is returned by calls on a closed Locker.
var errClosed = fmt.Errorf("etcdlock: %w", locks.ErrClosed)

// Options configure a [Locker]. Zero fields select defaults.
type Options struct {
	// Prefix starts every key the locker writes. Default
	// "/fenceguard/lock/". The queue of lock key k is Prefix +
	// url.PathEscape(k) + "/"; a [Sequencer] for these locks needs the
	// same Prefix.
	Prefix string

	// IdleLeases is how many unused leases per TTL the locker keeps for
	// reuse by later acquires, so that an acquire need not wait for a
	// new lease (docs/design.md, "etcdlock"). Default 16; negative
	// disables reuse. Every lease a key is granted under adds a name to
	// the key's queue in etcd's index until a compaction, so a hot key
	// costs the same after millions of grants only with reuse: keep at
	// least 2, since a lease whose keep-alive is on its way cannot be
	// taken, and with 1 a hot key takes a new lease about every TTL/3.
	IdleLeases int

	// LockDelay keeps the lock from everyone else for this long past the
	// Deadline of a lease that ended without a Release (expired, or its
	// keep-alive refused): every grant's etcd lease has a TTL of
	// TTL + LockDelay, rounded up to whole seconds, while the lease's TTL
	// and Deadline count the TTL alone. A Release deletes the grant's key
	// at once. 0, the default: no delay. At most [locks.MaxLockDelay]. See
	// "Lock-delay" in the package doc.
	LockDelay time.Duration
}

// Locker is a [locks.Locker] on etcd v3. It is safe for concurrent use.
// Close it when done, to revoke the leases it keeps for reuse.
type Locker struct {
	c Client
	o Options

	mu         sync.Mutex
	idle       map[int64][]idleLease // guarded by mu; by TTL in seconds
	refreshing map[int64]int         // guarded by mu; idle leases being refreshed, by TTL
	closed     bool                  // guarded by mu
	refreshes  sync.WaitGroup        // refreshIdle; Go only under mu while !closed
	cleanup    cleanup.Group         // background clean-ups (Lease.abandon)
}

type idleLease struct {
	id clientv3.LeaseID
	// renewed is when the request that last granted or renewed it was
	// sent: a grant for any TTL of its pool (secs) may count its deadline
	// from there, the etcd lease being at least that TTL plus the
	// lock-delay.
	renewed    time.Time
	since      time.Time   // idle since: its last grant's release
	timer      *time.Timer // nil, or refreshes it while idle (keepIdle)
	refreshing bool        // its background keep-alive is on its way: not to be taken
}

var _ locks.Locker = (*Locker)(nil)

var _ locks.MinTTLer = (*Locker)(nil)

// MinTTL implements [locks.MinTTLer]: [MinTTL], one second, etcd's lease
// resolution. (The server raises shorter leases to its own minimum, 2s
// with default settings: the lease is then longer than asked, and the
// local deadline, counted from the TTL asked for, stays conservative.)
func (l *Locker) MinTTL() time.Duration { return MinTTL }

// New returns a Locker on c.
func New(c Client, o Options) (*Locker, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil client", locks.ErrInvalidArgument)
	}
	if o.Prefix == "" {
		o.Prefix = defaultPrefix
	}
	if o.IdleLeases == 0 {
		o.IdleLeases = 16
	}
	if err := locks.CheckLockDelay(o.LockDelay); err != nil {
		return nil, fmt.Errorf("etcdlock: %w", err)
	}
	return &Locker{c: c, o: o, idle: map[int64][]idleLease{}, refreshing: map[int64]int{}}, nil
}

// Close revokes the idle leases the locker keeps (those being refreshed
// in the background once their keep-alive returns), waits for the clean-ups
// of failed acquires still running in the background, and fails later
// acquires with [locks.ErrClosed]. Granted leases stay usable. It takes at most
// about a second when etcd does not answer (the idle leases then lapse at
// their TTL). Close is idempotent.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	idle := l.idle
	l.idle = nil
	for _, ls := range idle {
		for _, il := range ls {
			il.stop()
		}
	}
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), cleanup.Timeout)
	defer cancel()
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for _, ls := range idle {
		for _, il := range ls {
			wg.Go(func() {
				if _, err := l.c.Revoke(ctx, il.id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	l.refreshes.Wait() // each revokes its lease itself, bounded like the revokes above
	l.cleanup.Close()
	return errors.Join(errs...)
}

// queue returns the key prefix under which grants of key queue.
func (l *Locker) queue(key string) string { return queuePrefix(l.o.Prefix, key) }

// queuePrefix is the layout of a lock's queue, shared with [Sequencer].
func queuePrefix(prefix, key string) string { return prefix + url.PathEscape(key) + "/" }

func seconds(ttl time.Duration) int64 { return int64((ttl + time.Second - 1) / time.Second) }

// secs is the etcd lease TTL, in seconds, of grants for ttl: ttl plus the
// lock-delay, rounded up. Local deadlines count ttl alone, so the lease
// outlives a grant's Deadline by at least the delay; idle leases are
// pooled by it.
func (l *Locker) secs(ttl time.Duration) int64 { return seconds(ttl + l.o.LockDelay) }

// lease returns a live lease for ttl and a conservative local deadline: a
// reused idle one — as it is when at least two thirds of its TTL are left,
// else refreshed by a keep-alive sent alongside the caller's next request —
// or a new grant.
//
// refresh reports doubt when the keep-alive failed without an answer: it
// may still reach the server later, so the lease must not serve another
// grant after this one (see Lease.reusable).
func (l *Locker) lease(ctx context.Context, ttl time.Duration) (id clientv3.LeaseID, refresh func() (deadline time.Time, doubt bool, err error), err error) {
	secs := l.secs(ttl)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return 0, nil, errClosed
	}
	for {
		ls := l.idle[secs]
		i := len(ls) - 1
		for i >= 0 && ls[i].refreshing {
			i--
		}
		if i < 0 {
			break
		}
		il := ls[i]
		l.idle[secs] = slices.Delete(ls, i, i+1)
		il.stop()
		deadline := il.renewed.Add(ttl) // this grant's TTL, not the last one's
		left := time.Until(deadline)
		if left < ttl/4 {
			continue // too close to expiry to trust; let it lapse
		}
		l.mu.Unlock()
		if left >= 2*ttl/3 {
			// Fresh enough: the holder's first renewal, a third of a TTL
			// from now, comes well before it runs out.
			return il.id, func() (time.Time, bool, error) { return deadline, false, nil }, nil
		}
		sent := time.Now()
		done := make(chan error, 1)
		go func() {
			_, err := l.c.KeepAliveOnce(ctx, il.id)
			done <- err
		}()
		return il.id, func() (time.Time, bool, error) {
			if err := <-done; err != nil {
				if errors.Is(err, rpctypes.ErrLeaseNotFound) {
					return time.Time{}, false, err
				}
				return deadline, true, nil // keep-alive failed: keep the old estimate
			}
			return sent.Add(ttl), false, nil
		}, nil
	}
	l.mu.Unlock()
	sent := time.Now()
	resp, err := l.c.Grant(ctx, secs)
	if err != nil {
		return 0, nil, err
	}
	return resp.ID, func() (time.Time, bool, error) { return sent.Add(ttl), false, nil }, nil
}

// putBack keeps a lease that holds no key for reuse. One that a later
// acquire would have to refresh first (less than two thirds of its TTL
// left) is refreshed now, in the background, and joins the idle leases
// when its keep-alive returns: the acquire that reuses it then sends
// nothing but its transaction, instead of waiting for a keep-alive on a
// stream of its own (the tail of the acquire's latency, once every third
// of a TTL for every lease in use).
func (l *Locker) putBack(id clientv3.LeaseID, ttl time.Duration, deadline time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	secs := l.secs(ttl)
	if l.closed || len(l.idle[secs])+l.refreshing[secs] >= l.o.IdleLeases {
		return // it lapses on its own at its TTL
	}
	switch left := time.Until(deadline); {
	case left >= 2*ttl/3:
		l.keepIdle(secs, ttl, idleLease{id: id, renewed: deadline.Add(-ttl), since: time.Now()})
	case left >= ttl/4:
		l.refreshing[secs]++
		since := time.Now()
		l.refreshes.Go(func() { l.refreshIdle(id, ttl, since) })
	default:
		// too close to expiry to trust; let it lapse
	}
}

// keepIdle adds il to the idle leases (l.mu held, l not closed). While it
// has been idle for less than a TTL, it is refreshed in the background
// before it would need a keep-alive at its reuse — at three quarters of its
// TTL left, staying in the pool meanwhile, though no acquire takes it while
// the keep-alive is on its way — so that a burst of acquires after a pause
// shorter than a TTL finds fresh leases, as a concurrency.Session's lease
// is kept alive while no lock uses it; but only for a TTL: then it lapses,
// and an idle locker costs etcd nothing.
func (l *Locker) keepIdle(secs int64, ttl time.Duration, il idleLease) {
	l.idle[secs] = append(l.idle[secs], l.scheduleRefresh(secs, ttl, il))
}

// scheduleRefresh returns il with the timer of its next background
// refresh, if it has one (see keepIdle).
func (l *Locker) scheduleRefresh(secs int64, ttl time.Duration, il idleLease) idleLease {
	il.timer = nil
	if time.Since(il.since) < ttl {
		id := il.id
		il.timer = time.AfterFunc(time.Until(il.renewed.Add(ttl/4)), func() { l.refreshIfIdle(secs, ttl, id) })
	}
	return il
}

func (il idleLease) stop() {
	if il.timer != nil {
		il.timer.Stop()
	}
}

// refreshIfIdle refreshes the idle lease id where it is, in the pool,
// unless an acquire took it meanwhile or the locker closed. No acquire
// takes it while the keep-alive is on its way, and it leaves the pool if
// the keep-alive fails without an answer: the keep-alive may still reach
// the server, and would extend the lease of a grant that took it, keeping
// the lock up to a TTL past that holder's last renewal, as a keep-alive of
// an earlier grant would (see Lease.reusable).
func (l *Locker) refreshIfIdle(secs int64, ttl time.Duration, id clientv3.LeaseID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := slices.IndexFunc(l.idle[secs], func(il idleLease) bool { return il.id == id })
	if l.closed || i < 0 || l.idle[secs][i].refreshing {
		return
	}
	l.idle[secs][i].refreshing = true
	l.refreshes.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanup.Timeout)
		defer cancel()
		sent := time.Now()
		_, err := l.c.KeepAliveOnce(ctx, id)
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.closed {
			return // Close revokes it
		}
		ls := l.idle[secs]
		i := slices.IndexFunc(ls, func(il idleLease) bool { return il.id == id })
		switch {
		case i < 0:
			// cannot happen: no acquire takes it while refreshing
		case err == nil:
			ls[i].stop()
			ls[i].refreshing = false
			ls[i].renewed = later(ls[i].renewed, sent)
			ls[i] = l.scheduleRefresh(secs, ttl, ls[i])
		default:
			// lapsed, or in doubt: left to lapse
			l.idle[secs] = slices.Delete(ls, i, i+1)
		}
	})
}

// refreshIdle sends a keep-alive of an idle lease and keeps the lease for
// reuse if it lives, or revokes it if the locker closed meanwhile.
func (l *Locker) refreshIdle(id clientv3.LeaseID, ttl time.Duration, since time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanup.Timeout)
	defer cancel()
	secs := l.secs(ttl)
	sent := time.Now()
	_, err := l.c.KeepAliveOnce(ctx, id)
	l.mu.Lock()
	l.refreshing[secs]--
	closed := l.closed
	if err == nil && !closed {
		l.keepIdle(secs, ttl, idleLease{id: id, renewed: sent, since: since})
	}
	l.mu.Unlock()
	if err == nil && closed {
		_, _ = l.c.Revoke(ctx, id) // else it lapses at its TTL
	}
}

// Issued returns an upper bound of every token granted so far, for any key:
// the cluster's current revision, from a linearizable read, exactly (a
// revision is an int64; nothing on the way is floating point).
//
// It bounds what was issued, not what a resource should accept: a queued
// waiter's token is fixed when it joins, so a forger presenting Issued()
// — above every waiter's token — is let in and every waiter is refused
// as stale. Resources refuse forgeries with token.SequencerCheck on
// [NewSequencer] instead, whose bound is the current holder's token.
func (l *Locker) Issued(ctx context.Context, key string) (token.Token, error) {
	resp, err := l.c.Get(ctx, l.queue(key), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("etcdlock: issued %q: %w", key, err)
	}
	return token.Token(resp.Header.Revision), nil
}

// TryAcquire implements [locks.Locker]: one transaction that writes the
// grant only if no key queues for the lock.
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	return l.acquire(ctx, key, ttl, false)
}

// Acquire implements [locks.Locker]: one transaction joins the queue; a
// waiter then watches the queue and wakes when the last key ahead of it is
// deleted.
func (l *Locker) Acquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	return l.acquire(ctx, key, ttl, true)
}

func (l *Locker) acquire(ctx context.Context, key string, ttl time.Duration, wait bool) (locks.Lease, error) {
	if err := locks.CheckArgs(key, ttl, MinTTL); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Start over when a reused lease had lapsed (every pooled lease may
	// have: revoked, or a pause the monotonic clock did not count), or ours
	// expired while waiting: up to three times, plus once per pooled lease.
	for attempt := 0; ; attempt++ {
		lease, err := l.join(ctx, key, ttl, wait)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && attempt < 3+max(l.o.IdleLeases, 0) {
			continue
		}
		if err != nil {
			if errors.Is(err, locks.ErrNotObtained) || errors.Is(err, locks.ErrClosed) {
				return nil, err
			}
			if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
				err = fmt.Errorf("%w: %w", ctx.Err(), err)
			}
			return nil, fmt.Errorf("etcdlock: acquire %q: %w", key, err)
		}
		return lease, nil
	}
}

func (l *Locker) join(ctx context.Context, key string, ttl time.Duration, wait bool) (*Lease, error) {
	id, refresh, err := l.lease(ctx, ttl)
	if err != nil {
		return nil, err
	}
	q := l.queue(key)
	// The key is named after the lease, as concurrency.Mutex names it, so
	// a lock's queue holds one name per lease over its whole history, not
	// one per grant: a deleted key stays in etcd's index until a
	// compaction, and the range over the queue walks every name the index
	// holds ("Bounded state" in docs/design.md). A lease serves one grant
	// at a time, and goes back to the pool only once its grant's key is
	// known deleted and nothing of that grant — a delete, a keep-alive —
	// can still reach the server (Lease.reusable), so a late deletion by
	// this name never meets a later grant, nor a late keep-alive extends
	// one.
	s := &Lease{l: l, c: l.c, key: key, id: id, ttl: ttl, myKey: fmt.Sprintf("%s%x", q, int64(id)),
		lost: make(chan struct{}), watchReady: make(chan struct{})}
	put := clientv3.OpPut(s.myKey, "", clientv3.WithLease(id))
	var resp *clientv3.TxnResponse
	if wait {
		// Join the queue, and fetch the first waiter.
		resp, err = l.c.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(s.myKey), "=", 0)).
			Then(put, clientv3.OpGet(q, clientv3.WithFirstCreate()...)).
			Commit()
	} else {
		// Write only if nobody queues.
		resp, err = l.c.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(q).WithPrefix(), "=", 0)).
			Then(put).
			Commit()
	}
	deadline, doubt, kerr := refresh()
	s.doubt = doubt
	if err != nil {
		if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// The transaction may have been applied though its reply was
			// lost (ctx ended in flight, a connection cut), or may still be
			// on its way: our key may be queueing, or may come. The lease
			// is not reused — reused, it would be kept alive, and the key
			// with it, blocking the lock for as long as the locker used
			// the lease — so any such key goes at the lease's TTL at the
			// latest; revoking the lease frees the lock sooner, and unlike
			// a delete of the key it cannot be overtaken by the
			// transaction: a put on a revoked lease fails.
			l.cleanup.Run(ctx, func(ctx context.Context) { _, _ = l.c.Revoke(ctx, id) })
		}
		return nil, err
	}
	if kerr != nil {
		// The put succeeded, so the lease was live when it was applied;
		// the keep-alive raced its expiry. Treat it as lapsed.
		s.abandon(ctx)
		return nil, kerr
	}
	s.deadline = deadline
	if !resp.Succeeded {
		if !wait {
			if !doubt {
				l.putBack(id, ttl, deadline)
			}
			return nil, locks.ErrNotObtained
		}
		// Our key exists already: a grant with this lease was not cleaned
		// up. Never reuse a key blindly; start afresh.
		return nil, fmt.Errorf("etcdlock: key %q already exists", s.myKey)
	}
	s.rev = resp.Header.Revision
	if !wait {
		return s, nil
	}
	first := resp.Responses[1].GetResponseRange().Kvs
	if len(first) == 0 || first[0].CreateRevision == s.rev {
		return s, nil
	}
	if err := s.waitTurn(ctx, q); err != nil {
		s.abandon(ctx)
		return nil, err
	}
	return s, nil
}

// waitTurn waits until no key older than ours queues. It watches the
// whole queue from the current revision, then reads which keys are ahead,
// and from then on counts their deletions as the watch reports them: the
// hand-over costs the waiter no request at all. (A watch opened at an older
// revision would be served by etcd's catch-up of lagging watchers, every
// 100ms, not at once.) Our lease is kept alive meanwhile. When the keys
// ahead are gone, confirmTurn makes sure the news is not older than our
// own key.
func (s *Lease) waitTurn(ctx context.Context, q string) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := s.c.Watch(wctx, q, clientv3.WithPrefix(), clientv3.WithCreatedNotify(), clientv3.WithFilterPut())
	keepAlive := time.NewTimer(s.ttl / 3)
	defer keepAlive.Stop()
	var ahead map[string]bool // nil until the watch is in place
	for {
		select {
		case wr, ok := <-wch:
			if !ok {
				if err := ctx.Err(); err != nil {
					return err
				}
				return errors.New("etcdlock: watch closed")
			}
			if err := wr.Err(); err != nil {
				return err
			}
			if wr.Created && ahead == nil {
				resp, err := s.c.Txn(ctx).Then(
					clientv3.OpGet(q, clientv3.WithPrefix(), clientv3.WithMaxCreateRev(s.rev-1), clientv3.WithKeysOnly()),
					clientv3.OpGet(s.myKey, clientv3.WithKeysOnly()),
				).Commit()
				if err != nil {
					return err
				}
				if mine := resp.Responses[1].GetResponseRange().Kvs; len(mine) == 0 || mine[0].CreateRevision != s.rev {
					return fmt.Errorf("etcdlock: waiting key %q vanished: %w", s.myKey, rpctypes.ErrLeaseNotFound)
				}
				ahead = map[string]bool{}
				for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
					ahead[string(kv.Key)] = true
				}
			}
			for _, ev := range wr.Events {
				if ev.Type != mvccpb.DELETE {
					continue
				}
				if string(ev.Kv.Key) == s.myKey {
					return fmt.Errorf("etcdlock: waiting key %q deleted: %w", s.myKey, rpctypes.ErrLeaseNotFound)
				}
				delete(ahead, string(ev.Kv.Key))
			}
			if ahead != nil && len(ahead) == 0 {
				return s.confirmTurn(ctx)
			}
		case <-keepAlive.C:
			sent := time.Now()
			if _, err := s.c.KeepAliveOnce(ctx, s.id); err != nil {
				s.mu.Lock()
				s.doubt = true
				s.mu.Unlock()
				return err
			}
			s.mu.Lock()
			s.deadline = sent.Add(s.ttl)
			s.mu.Unlock()
			keepAlive.Reset(s.ttl / 3)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// confirmTurn runs when the keys ahead are gone: the lock is ours if our own
// key is still there. The deletions that said so may be old news — the
// waiter paused (GC, SIGSTOP, swap), or its watch lagged, while its lease
// ran out and etcd deleted its key, and then someone else queued and took
// the lock; the deletion of our key may be in a later watch response than
// the ones that emptied the queue ahead, or still on its way. While the
// local deadline (from before our last keep-alive was sent) is more than
// half a TTL away, the lease is alive and so is our key (unless deleted by
// hand, which [Lease.Lost] reports): the turn is ours and costs no
// request, as in the common case, where keep-alives every third of a TTL
// keep it at least two thirds away. Otherwise one round trip
// (a keep-alive and a read of our key, together) decides it, and refreshes
// the deadline the caller gets; a lapsed key means starting over, with an
// error that [Locker.Acquire] retries.
func (s *Lease) confirmTurn(ctx context.Context) error {
	if time.Until(s.Deadline()) > s.ttl/2 {
		return nil
	}
	held, err := s.refresh(ctx)
	if err != nil {
		return err
	}
	if !held {
		return fmt.Errorf("etcdlock: waiting key %q lapsed before its turn was seen: %w", s.myKey, rpctypes.ErrLeaseNotFound)
	}
	return nil
}

// refresh sends a keep-alive of the grant's lease and, alongside it (one
// round trip, not two), a linearizable read of its key. It reports whether
// the key is there with this grant's create revision and the lease lives,
// and then moves the deadline, counted from before both were sent.
func (s *Lease) refresh(ctx context.Context) (held bool, err error) {
	sent := time.Now()
	kept := make(chan error, 1)
	go func() {
		_, err := s.c.KeepAliveOnce(ctx, s.id)
		kept <- err
	}()
	resp, err := s.c.Get(ctx, s.myKey, clientv3.WithKeysOnly())
	if kerr := <-kept; kerr != nil {
		if errors.Is(kerr, rpctypes.ErrLeaseNotFound) {
			return false, nil
		}
		s.mu.Lock()
		s.doubt = true
		s.mu.Unlock()
		return false, kerr
	}
	if err != nil {
		return false, err
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != s.rev {
		return false, nil
	}
	s.mu.Lock()
	s.deadline = sent.Add(s.ttl)
	s.mu.Unlock()
	return true, nil
}

// Lease is an etcdlock grant. It implements [locks.Lease].
type Lease struct {
	l     *Locker
	c     Client
	key   string
	id    clientv3.LeaseID
	ttl   time.Duration
	myKey string // the queue key this grant wrote
	rev   int64  // its create revision: the token

	mu       sync.Mutex
	deadline time.Time // guarded by mu
	released bool      // guarded by mu
	renewing int       // guarded by mu; Renew calls in flight
	doubt    bool      // guarded by mu; a call on the lease may still reach the server

	lost    chan struct{} // made with the Lease; closed by the watch behind Lost
	lostWhy error         // written once, before lost is closed

	watchOnce  sync.Once
	stopWatch  context.CancelFunc // ends the watch behind lost
	watchDone  chan struct{}      // closed when that watch's goroutine returns
	watchReady chan struct{}      // closed once that watch is in place and found the key
}

var (
	_ locks.Lease        = (*Lease)(nil)
	_ locks.LossNotifier = (*Lease)(nil)
)

// Lost implements [locks.LossNotifier]: the returned channel is closed when
// the grant is known lost or can no longer be known held:
//
//   - its key is deleted — its lease expired, an operator deleted it — or is
//     found gone when the watch starts;
//   - the member the client is connected to has no leader: the watch is
//     opened with clientv3.WithRequireLeader, so a member cut off from its
//     peers (or whose cluster lost its quorum) ends it, after about three
//     election timeouts without a leader (etcd's own rule for cancelling
//     such streams), or refuses it at once when it has no leader already.
//     A holder on the minority side of a partition cannot renew, and the
//     majority will expire its lease and grant the lock again: this is the
//     moment to stop, not the local deadline;
//   - the watch ends for any other reason — the client closed, the watch
//     cancelled or failed by the server (a compaction, say) — or its first
//     read of the key fails: nothing would report a loss any more.
//
// Once it is closed, [Lease.Renew] fails with [locks.ErrNotHeld], wrapping
// the reason, even if the cluster heals: the lock may have been granted
// again meanwhile. Release still deletes the key if it is there.
//
// What it does not see: a connection that hangs without failing. clientv3
// re-establishes a broken watch stream silently, so a client cut off from
// a member that still has its leader learns nothing until the stream
// comes back; the holder's local deadline (see package guard) covers that.
//
// The first call starts the watch (one goroutine and one watcher on the
// client's require-leader stream) and returns at once, the server frozen
// or not. [Lease.Release] ends it and waits for
// its goroutine: the channel may close while Release deletes the key (a
// deletion like any other), never after Release returned.
func (s *Lease) Lost() <-chan struct{} {
	s.watchOnce.Do(func() {
		s.watchDone = make(chan struct{})
		ctx, stop := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
		s.stopWatch = stop
		go func() {
			defer close(s.watchDone)
			// In the goroutine: clientv3's Watch waits for its stream, which
			// a frozen server never opens, and Lost must return at once
			// (guard's keep-alive calls Lost before its first renewal).
			wch := s.c.Watch(ctx, s.myKey, clientv3.WithCreatedNotify(), clientv3.WithFilterPut())
			why := s.follow(ctx, wch)
			if ctx.Err() != nil {
				return // stopped by Release
			}
			s.lostWhy = why
			close(s.lost)
		}()
	})
	return s.lost
}

// follow reads the watch behind Lost until the grant's key is gone or the
// watch can no longer tell, and says which.
func (s *Lease) follow(ctx context.Context, wch clientv3.WatchChan) error {
	ready := false
	for wr := range wch {
		if err := wr.Err(); err != nil {
			return fmt.Errorf("etcdlock: watch of %q ended: %w", s.myKey, err)
		}
		if wr.Canceled {
			return fmt.Errorf("etcdlock: watch of %q cancelled", s.myKey)
		}
		if wr.Created && !ready { // clientv3 reports only the first creation; resumed watches miss nothing
			// The watch starts at the current revision: a deletion before
			// it would never be reported.
			resp, err := s.c.Get(ctx, s.myKey, clientv3.WithKeysOnly())
			if err != nil {
				return fmt.Errorf("etcdlock: reading %q: %w", s.myKey, err)
			}
			if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != s.rev {
				return fmt.Errorf("etcdlock: key %q is gone", s.myKey)
			}
			ready = true
			close(s.watchReady)
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				return fmt.Errorf("etcdlock: key %q deleted at revision %d", s.myKey, ev.Kv.ModRevision)
			}
		}
	}
	return fmt.Errorf("etcdlock: watch of %q ended", s.myKey)
}

// stopWatching ends the watch behind Lost, if any, and waits for it. It
// runs after the release's delete, which ends the watch on its own soon
// (a deletion, or the key found gone): while the watch's first read may be
// in flight it waits for that (or for ctx) before cancelling, so that an
// ordinary release does not cut a request short — the etcd client logs a
// warning for each one that is.
func (s *Lease) stopWatching(ctx context.Context) {
	s.watchOnce.Do(func() {}) // no watch may start after this
	if s.stopWatch == nil {
		return
	}
	select {
	case <-s.watchReady:
	case <-s.watchDone:
	case <-ctx.Done():
	}
	s.stopWatch()
	<-s.watchDone
}

// Key implements [locks.Lease].
func (s *Lease) Key() string { return s.key }

// Token implements [locks.Lease]: the create revision of the grant's key.
func (s *Lease) Token() token.Token { return token.Token(s.rev) }

// TTL implements [locks.Lease].
func (s *Lease) TTL() time.Duration { return s.ttl }

// Deadline implements [locks.Lease].
func (s *Lease) Deadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadline
}

// LeaseID is the etcd lease the grant's key is attached to.
func (s *Lease) LeaseID() clientv3.LeaseID { return s.id }

// IsOwner is a comparison that holds only while this grant holds the lock,
// for etcd transactions of your own that must be fenced by it (as
// concurrency.Mutex's IsOwner): the grant's key still there with its create
// revision. A grant is the lock's only while its key is the oldest in the
// queue, so the comparison holds from the grant until its release or
// expiry, and never again after:
//
//	resp, err := cli.Txn(ctx).If(lease.IsOwner()).Then(clientv3.OpPut(k, v)).Commit()
//	// !resp.Succeeded: the lock had moved on; nothing was written.
//
// Reach it through package guard with [locks.LeaseAs] on guard's
// Lease.Unwrap.
func (s *Lease) IsOwner() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(s.myKey), "=", s.rev)
}

// OwnKey is the etcd key this grant wrote in the lock's queue (Key is the
// lock's key): concurrency.Mutex's Key. It is attached to [Lease.LeaseID].
func (s *Lease) OwnKey() string { return s.myKey }

// abandon removes the grant's key (a gave-up waiter, or a grant whose
// caller will never see it) on a context of its own, since ctx, the
// caller's, may be done: see Locker.background.
func (s *Lease) abandon(ctx context.Context) {
	if s.rev == 0 {
		return
	}
	s.l.cleanup.Run(ctx, func(ctx context.Context) {
		resp, err := s.c.Txn(ctx).If(s.IsOwner()).Then(clientv3.OpDelete(s.myKey)).Commit()
		s.mu.Lock()
		reuse := err == nil && resp.Succeeded && s.reusable()
		deadline := s.deadline
		s.mu.Unlock()
		if reuse {
			s.l.putBack(s.id, s.ttl, deadline)
		}
	})
}

// Renew implements [locks.Lease]: a keep-alive of the grant's lease and,
// sent alongside it (one round trip, not two), a check that its key is
// still there with its create revision (a lease can outlive a key deleted
// by hand). The deadline counts from before both were sent. After [Lease.Lost]
// closed, Renew fails at once with [locks.ErrNotHeld] and the reason.
func (s *Lease) Renew(ctx context.Context) error {
	s.mu.Lock()
	released := s.released
	if !released {
		s.renewing++
	}
	s.mu.Unlock()
	if released {
		return locks.NotHeldError("renew", s.key, s.Token())
	}
	defer func() {
		s.mu.Lock()
		s.renewing--
		s.mu.Unlock()
	}()
	select {
	case <-s.lost:
		return fmt.Errorf("%w: %w", locks.NotHeldError("renew", s.key, s.Token()), s.lostWhy)
	default:
	}
	held, err := s.refresh(ctx)
	if err != nil {
		return fmt.Errorf("etcdlock: renew %q: %w", s.key, err)
	}
	if !held {
		return locks.NotHeldError("renew", s.key, s.Token())
	}
	return nil
}

// Release implements [locks.Lease]: deletes the grant's key. The key is
// named after the grant's lease, which serves another grant only when
// nothing of this one can still reach the server (see reusable): a
// release that failed — its delete perhaps applied later — leaves the
// lease out of use even if a retry succeeds. So a late or retried release
// never removes a newer grant, and a plain delete is as safe as one
// guarded by the create revision, and cheaper (no transaction).
func (s *Lease) Release(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released {
		return nil
	}
	resp, err := s.c.Delete(ctx, s.myKey)
	if err != nil {
		s.doubt = true // the delete may still be applied
		return fmt.Errorf("etcdlock: release %q: %w", s.key, err)
	}
	s.stopWatching(ctx)
	if resp.Deleted == 0 {
		return locks.NotHeldError("release", s.key, s.Token())
	}
	s.released = true
	if s.reusable() {
		s.l.putBack(s.id, s.ttl, s.deadline)
	}
	return nil
}

// reusable reports whether the lease may serve another grant once this
// one's key is deleted (s.mu held): no Renew in flight, and no request of
// this grant that failed without an answer. Such a request may still be
// applied: a delete would remove the next grant's key, which has the same
// name, and a keep-alive (of the lease, not of the grant) would extend the
// next grant's lease, keeping a crashed holder's lock up to a TTL longer.
// Such a lease is left to lapse at its TTL.
func (s *Lease) reusable() bool { return s.renewing == 0 && !s.doubt }

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
