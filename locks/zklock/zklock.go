package zklock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/token"
)

// MinTTL is the shortest lease zklock grants. Leases shorter than the
// server's minimum session timeout are allowed; see "Sessions and TTLs" in
// the package doc for what they cost.
const MinTTL = 100 * time.Millisecond

// errClosed is returned by calls on a closed Locker, and is why its leases
// ended.
var errClosed = fmt.Errorf("zklock: %w", locks.ErrClosed)

// errNoSession is returned by TryAcquire and Issued when no session with
// the ensemble came up within Options.SessionWait: they make one attempt,
// and do not wait for an unreachable ensemble as Acquire does.
var errNoSession = errors.New("zklock: no ZooKeeper session")

// Options configure a [Locker]. Zero fields select defaults.
type Options struct {
	// Prefix is the znode under which the locker keeps one child per key.
	// It is created (with its parents) when missing. Default
	// "/fenceguard/lock".
	Prefix string

	// ACL is given to every znode the locker creates. Default
	// zk.WorldACL(zk.PermAll).
	ACL []zk.ACL

	// Auth is added to every session before its first request, and again
	// by go-zookeeper after every reconnect.
	Auth []Auth

	// Logger receives go-zookeeper's log lines. Default zk.DefaultLogger
	// (the standard library's log package).
	Logger zk.Logger

	// Dialer connects to a server. Default net.DialTimeout.
	Dialer zk.Dialer

	// MaxSessions bounds the number of sessions, one per distinct TTL, the
	// locker opens. An acquire with yet another TTL fails with
	// [locks.ErrInvalidArgument]. Default 8.
	MaxSessions int

	// SessionWait bounds how long TryAcquire and Issued wait for a session
	// to come up (a first connection, or a reconnect after a break) before
	// they fail with an error (no session), whatever their context allows.
	// TryAcquire waits at least its TTL. Acquire waits as long as its
	// context allows. Default 5s.
	SessionWait time.Duration

	// LockDelay keeps the lock from everyone else for this long past the
	// Deadline of a lease that ended without a Release (not renewed in
	// time, its connection lost, its renewal refused): the grant's znode
	// stays until then, and each session asks for a timeout of its TTL +
	// LockDelay, so that a holder that vanished keeps its znodes as long.
	// The lease's TTL and Deadline count the TTL alone. A Release deletes
	// the znode at once. 0, the default: no delay. At most
	// [locks.MaxLockDelay], and TTL + LockDelay at most the server's
	// maximum session timeout (40s by default), or acquires are refused.
	// See "Lock-delay" in the package doc.
	LockDelay time.Duration
}

// Auth is a credential for zk.Conn.AddAuth, e.g. {"digest", []byte("user:pw")}.
type Auth struct {
	Scheme      string
	Credentials []byte
}

// Locker is a [locks.Locker] on ZooKeeper. It is safe for concurrent use.
// It owns its connections, one per distinct TTL (see the package doc):
// Close it when done.
type Locker struct {
	servers []string
	o       Options
	bg      context.Context // ends at Close: stops background clean-ups
	stop    context.CancelFunc

	mu       sync.Mutex
	sessions map[int64]*session // guarded by mu; by TTL in ms
	closed   bool               // guarded by mu
	wg       sync.WaitGroup     // goroutines started by spawn; Add under mu while !closed
}

var _ locks.Locker = (*Locker)(nil)

var _ locks.MinTTLer = (*Locker)(nil)

// MinTTL implements [locks.MinTTLer]: [MinTTL]. TTLs between it and the
// server's minimum session timeout are granted, with a longer session (see
// "Sessions and TTLs" in the package doc); a TTL (plus the lock-delay)
// above the server's maximum session timeout is refused at the first
// acquire, once the server said what it grants.
func (l *Locker) MinTTL() time.Duration { return MinTTL }

// New returns a Locker for the ZooKeeper ensemble at servers (host:port;
// go-zookeeper takes no chroot suffix: put the chroot in Options.Prefix). It
// connects lazily, on the first acquire of each TTL. It fails with an error
// wrapping [locks.ErrInvalidArgument] when the arguments are unusable.
func New(servers []string, o Options) (*Locker, error) {
	if len(servers) == 0 {
		return nil, fmt.Errorf("%w: no ZooKeeper servers", locks.ErrInvalidArgument)
	}
	for _, s := range servers {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return nil, fmt.Errorf("%w: server %q: %v", locks.ErrInvalidArgument, s, err)
		}
	}
	if o.Prefix == "" {
		o.Prefix = "/fenceguard/lock"
	}
	if err := checkPrefix(o.Prefix); err != nil {
		return nil, err
	}
	if o.ACL == nil {
		o.ACL = zk.WorldACL(zk.PermAll)
	}
	if o.Logger == nil {
		o.Logger = zk.DefaultLogger
	}
	if o.Dialer == nil {
		o.Dialer = net.DialTimeout
	}
	if o.MaxSessions == 0 {
		o.MaxSessions = 8
	}
	if o.SessionWait == 0 {
		o.SessionWait = 5 * time.Second
	}
	if o.SessionWait < 0 {
		return nil, fmt.Errorf("%w: SessionWait %v", locks.ErrInvalidArgument, o.SessionWait)
	}
	if o.MaxSessions < 0 {
		return nil, fmt.Errorf("%w: MaxSessions %d", locks.ErrInvalidArgument, o.MaxSessions)
	}
	if err := locks.CheckLockDelay(o.LockDelay); err != nil {
		return nil, fmt.Errorf("zklock: %w", err)
	}
	bg, stop := context.WithCancel(context.Background())
	return &Locker{
		servers:  slices.Clone(servers),
		o:        o,
		bg:       bg,
		stop:     stop,
		sessions: map[int64]*session{},
	}, nil
}

func checkPrefix(p string) error {
	if !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") {
		return fmt.Errorf("%w: prefix %q must start with / and not end with one", locks.ErrInvalidArgument, p)
	}
	for _, c := range strings.Split(p[1:], "/") {
		if c == "" || c == "." || c == ".." {
			return fmt.Errorf("%w: prefix %q has an empty, . or .. component", locks.ErrInvalidArgument, p)
		}
	}
	return nil
}

// Close closes every session the locker opened. Closing a session deletes
// its ephemeral znodes, so every lease granted by the locker ends: their
// Renew and Release report [locks.ErrNotHeld]. Blocked and later acquires
// fail with [locks.ErrClosed]. Close waits for the locker's goroutines and
// go-zookeeper's to finish: at once with the server answering, but with
// the server frozen or silent go-zookeeper's goroutines end only when
// their connection times out (about the session timeout), and Close waits
// for them up to 10s per session, in parallel across sessions, then
// returns leaving the rest to finish. It is idempotent.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	sessions := l.sessions
	l.sessions = nil
	l.mu.Unlock()
	l.stop()
	var wg sync.WaitGroup
	for _, s := range sessions {
		wg.Go(s.shutdown)
	}
	wg.Wait()
	l.wg.Wait()
	return nil
}

// spawn runs fn in a goroutine that Close waits for. It reports false, and
// does not run fn, once the locker is closed.
func (l *Locker) spawn(fn func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.wg.Go(fn)
	return true
}

func ms(ttl time.Duration) int64 { return int64((ttl + time.Millisecond - 1) / time.Millisecond) }

// session returns the session for ttl once it is up, dialling it first if
// needed.
func (l *Locker) session(ctx context.Context, ttl time.Duration) (*session, view, error) {
	key := ms(ttl)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, view{}, errClosed
	}
	s := l.sessions[key]
	if s == nil {
		if len(l.sessions) >= l.o.MaxSessions {
			l.mu.Unlock()
			return nil, view{}, fmt.Errorf("%w: ttl %v would need a session of its own, and the locker has MaxSessions (%d) already",
				locks.ErrInvalidArgument, ttl, l.o.MaxSessions)
		}
		s = newSession(l, time.Duration(key)*time.Millisecond)
		l.sessions[key] = s
		l.wg.Go(s.dial)
	}
	l.mu.Unlock()
	v, err := s.waitUp(ctx)
	if err != nil {
		select {
		case <-s.dialed:
			if s.dialErr != nil { // e.g. a server name that does not resolve
				l.drop(key, s)
			}
		default:
		}
		return nil, view{}, err
	}
	if v.timeout < ttl+l.o.LockDelay {
		// The server clamps timeouts to its maxSessionTimeout: such a
		// session could expire before the lease's deadline (plus the
		// lock-delay).
		l.drop(key, s)
		return nil, view{}, fmt.Errorf("%w: ttl %v plus lock-delay %v is above the server's maximum session timeout (it granted %v)",
			locks.ErrInvalidArgument, ttl, l.o.LockDelay, v.timeout)
	}
	return s, v, nil
}

// drop forgets a session that is of no use and closes it.
func (l *Locker) drop(key int64, s *session) {
	l.mu.Lock()
	if l.sessions[key] == s {
		delete(l.sessions, key)
	} else {
		s = nil
	}
	l.mu.Unlock()
	if s != nil && !l.spawn(s.shutdown) {
		s.shutdown() // Close has begun and may not see it any more
	}
}

// dir is the znode under which grants of key queue. Escaping makes any
// string one path component: '/' becomes %2F, and so do control and
// non-ASCII bytes, which ZooKeeper partly refuses.
func (l *Locker) dir(key string) string { return l.o.Prefix + "/" + escape(key) }

func escape(key string) string {
	e := url.PathEscape(key)
	if e == "." || e == ".." { // the only escapes ZooKeeper would still refuse
		e = strings.ReplaceAll(e, ".", "%2E")
	}
	return e
}

// Issued returns an upper bound of every token granted for key so far: the
// Pzxid of the key's znode — the zxid of the last create or delete of a
// child, so at least the Czxid of every grant — read after a sync, so a
// follower that lags the leader cannot answer with an old one. When the
// key's znode does not exist (never used, or removed while idle), the
// prefix znode's Pzxid bounds its grants instead: removing the key's znode
// raised it. A presented token above the bound was never issued; but the
// bound counts the tokens of queued waiters too, so a forger presenting it
// passes and locks the waiters out: resources should refuse tokens above
// the current holder's instead, with a [Sequencer].
//
// Issued writes nothing. It uses an open session, or opens one with a 10s
// timeout when the locker has none.
func (l *Locker) Issued(ctx context.Context, key string) (token.Token, error) {
	if key == "" {
		return 0, fmt.Errorf("%w: empty key", locks.ErrInvalidArgument)
	}
	s, _, err := boundedSession(ctx, l.o.SessionWait, l.anySession)
	if err != nil {
		return 0, fmt.Errorf("zklock: issued %q: %w", key, err)
	}
	dir := l.dir(key)
	t, err := call(ctx, l, func() (token.Token, error) {
		if _, err := run(s, func(c *zk.Conn) (string, error) { return c.Sync(dir) }); err != nil {
			return 0, fmt.Errorf("sync: %w", err)
		}
		for _, p := range []string{dir, l.o.Prefix} {
			ok, st, err := s.conn.Exists(p)
			if err != nil {
				return 0, err
			}
			if ok {
				return token.Token(st.Pzxid), nil
			}
		}
		return 0, nil // no lock was ever taken under this prefix
	}, nil, 0)
	if err != nil {
		return 0, fmt.Errorf("zklock: issued %q: %w", key, err)
	}
	return t, nil
}

func (l *Locker) anySession(ctx context.Context) (*session, view, error) {
	l.mu.Lock()
	var up *session
	for _, s := range l.sessions {
		if s.view().up {
			up = s
			break
		}
	}
	l.mu.Unlock()
	if up != nil {
		if v, err := up.waitUp(ctx); err == nil {
			return up, v, nil
		}
	}
	return l.session(ctx, 10*time.Second)
}

// boundedSession runs get (which waits for a session) for at most wait,
// and reports running out of it as an error (no session) rather than as the
// caller's context ending.
func boundedSession(ctx context.Context, wait time.Duration, get func(context.Context) (*session, view, error)) (*session, view, error) {
	bctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	s, v, err := get(bctx)
	if err != nil && ctx.Err() == nil && bctx.Err() != nil {
		return nil, view{}, fmt.Errorf("%w within %v", errNoSession, wait)
	}
	return s, v, err
}

// TryAcquire implements [locks.Locker]. It reads the key's znode first and
// writes nothing while the lock is held or waited for. It waits for a
// session at most Options.SessionWait (at least the TTL), then fails with
// an error (no session).
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	return l.acquire(ctx, key, ttl, false)
}

// Acquire implements [locks.Locker]: it queues an ephemeral sequential znode
// and waits for the deletion of its predecessor.
func (l *Locker) Acquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	return l.acquire(ctx, key, ttl, true)
}

// errVanished: the waiting znode disappeared (its session expired while it
// queued). The acquire starts over.
var errVanished = errors.New("zklock: the waiting znode vanished with its session")

func (l *Locker) acquire(ctx context.Context, key string, ttl time.Duration, wait bool) (locks.Lease, error) {
	if err := locks.CheckArgs(key, ttl, MinTTL); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	a := &attempt{l: l, key: key, dir: l.dir(key), ttl: ttl, wait: wait}
	// go-zookeeper's calls block and take no context. So that the acquire
	// returns when ctx ends, it runs in a goroutine of its own (one, not one
	// per call), which notices ctx at its next wait and deletes what it
	// queued; a lease it obtains too late is released.
	lease, err := call(ctx, l, func() (*Lease, error) {
		var err error
		for range 3 {
			var lease *Lease
			if lease, err = a.run(ctx); err == nil {
				return lease, nil
			}
			if !errors.Is(err, errVanished) || ctx.Err() != nil {
				break
			}
		}
		return nil, err
	}, func(lease *Lease, err error) {
		if err == nil {
			rctx, cancel := context.WithTimeout(l.bg, 10*time.Second)
			defer cancel()
			_ = lease.Release(rctx)
		}
	}, abandonWait)
	if err == nil {
		return lease, nil
	}
	switch {
	case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
		return nil, fmt.Errorf("zklock: acquire %q: %w: %w", key, ctx.Err(), err)
	case errors.Is(err, locks.ErrNotObtained), errors.Is(err, locks.ErrInvalidArgument), errors.Is(err, locks.ErrClosed):
		return nil, err
	}
	return nil, fmt.Errorf("zklock: acquire %q: %w", key, err)
}

// attempt is one acquire of one key.
type attempt struct {
	l    *Locker
	key  string
	dir  string
	ttl  time.Duration
	wait bool

	s      *session
	prefix string // the name of this try's znode up to its sequence number
}

// node is this attempt's znode.
type node struct {
	name  string
	czxid int64
	owner int64 // session id; 0 while unknown
}

func (a *attempt) run(ctx context.Context) (*Lease, error) {
	get := func(ctx context.Context) (*session, view, error) { return a.l.session(ctx, a.ttl) }
	var s *session
	var v view
	var err error
	if a.wait {
		s, v, err = get(ctx)
	} else {
		s, v, err = boundedSession(ctx, max(a.l.o.SessionWait, a.ttl), get)
	}
	if err != nil {
		return nil, err
	}
	a.s = s
	if !a.wait {
		ok, st, err := s.conn.Exists(a.dir) // not through run: see queue's GetW
		if err != nil {
			return nil, err
		}
		if !ok {
			st = &zk.Stat{}
		}
		if st.NumChildren > 0 {
			return nil, locks.ErrNotObtained
		}
	}
	// The random part names this try: when a create's reply is lost, the
	// znode it may have made is found by it (ZooKeeper's "protected" create).
	a.prefix = rand.Text() + "-"
	n, sent, first, err := a.create(ctx, &v)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		a.abandon(n)
		return nil, err
	}
	if first {
		if lease := a.grant(n, sent, v.epoch); lease != nil {
			return lease, nil
		}
	} else if !a.wait && n.owner != 0 {
		a.abandon(n) // the reply counted others ahead
		return nil, locks.ErrNotObtained
	}
	lease, err := a.queue(ctx, n)
	if err != nil && !errors.Is(err, errVanished) {
		a.abandon(n)
	}
	return lease, err
}

// create makes the attempt's znode and, in the same transaction, sets the
// key's znode's data: the reply to that carries the transaction's zxid (the
// new znode's Czxid: the token) and the number of children (1: the lock is
// ours), so an uncontended acquire takes one round trip. first reports that
// the znode was the only child, in epoch vp.epoch (updated when the session
// came back in between), with sent the time the request went out.
func (a *attempt) create(ctx context.Context, vp *view) (n node, sent time.Time, first bool, err error) {
	s, v := a.s, *vp
	defer func() { *vp = v }() // the epoch the reply came in, after a reconnect
	for i := 0; ; i++ {
		sent = time.Now()
		res, err := s.conn.Multi(
			&zk.CreateRequest{Path: a.dir + "/" + a.prefix, Data: []byte{}, Acl: a.l.o.ACL, Flags: zk.FlagEphemeralSequential},
			&zk.SetDataRequest{Path: a.dir, Data: []byte{}, Version: -1},
		)
		switch {
		case err == nil:
			name := strings.TrimPrefix(res[0].String, a.dir+"/")
			if !s.answered(v.epoch, sent) {
				// The connection broke after the reply: who owns the
				// znode now is checked while queueing.
				return node{name: name, czxid: res[1].Stat.Mzxid}, sent, false, nil
			}
			return node{name: name, czxid: res[1].Stat.Mzxid, owner: v.id}, sent, res[1].Stat.NumChildren == 1, nil
		case errors.Is(err, zk.ErrNoNode) && i < 3:
			if err := a.makeDir(ctx); err != nil {
				return node{}, sent, false, err
			}
		case transient(err):
			// The reply was lost: the create may or may not have been
			// applied. Look for it by name once the session is back.
			owner := v.id
			if v, err = s.waitUp(ctx); err == nil {
				var n node
				var found bool
				if n, found, err = a.find(ctx); err == nil && found {
					return n, sent, false, nil
				}
			}
			if err != nil {
				a.l.spawn(func() { s.removeAttempt(a.dir, a.prefix, owner) })
				return node{}, sent, false, err
			}
		default:
			return node{}, sent, false, err
		}
	}
}

// find looks for the attempt's znode after a create whose reply was lost.
func (a *attempt) find(ctx context.Context) (node, bool, error) {
	children, err := run(a.s, func(c *zk.Conn) ([]string, error) {
		// The server this session reconnected to may lag the leader, and
		// the create may still be on its way: sync first, so the listing
		// shows it if it was applied. Else a second create would follow,
		// and the first znode, kept alive by the live session, block the
		// key.
		if _, err := c.Sync(a.dir); err != nil {
			return nil, err
		}
		ch, _, err := c.Children(a.dir)
		return ch, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return node{}, false, nil
	}
	if err != nil {
		return node{}, false, err
	}
	for _, name := range children {
		if !strings.HasPrefix(name, a.prefix) {
			continue
		}
		st, err := run(a.s, func(c *zk.Conn) (*zk.Stat, error) {
			ok, st, err := c.Exists(a.dir + "/" + name)
			if err == nil && !ok {
				err = zk.ErrNoNode
			}
			return st, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			return node{}, false, nil
		}
		if err != nil {
			return node{}, false, err
		}
		return node{name: name, czxid: st.Czxid, owner: st.EphemeralOwner}, true, nil
	}
	return node{}, false, nil
}

// makeDir creates the key's znode, a container (ZooKeeper removes it once
// it has had children and has none left), and the prefix above it.
func (a *attempt) makeDir(ctx context.Context) error {
	acl := a.l.o.ACL
	for i := 0; ; i++ {
		_, err := run(a.s, func(c *zk.Conn) (string, error) {
			return c.CreateContainer(a.dir, []byte{}, zk.FlagContainer, acl)
		})
		if err == nil || errors.Is(err, zk.ErrNodeExists) {
			return nil
		}
		if !errors.Is(err, zk.ErrNoNode) || i > 0 {
			return err
		}
		cur := ""
		for _, part := range strings.Split(a.l.o.Prefix[1:], "/") {
			cur += "/" + part
			_, err := run(a.s, func(c *zk.Conn) (string, error) {
				return c.Create(cur, []byte{}, zk.FlagPersistent, acl)
			})
			if err != nil && !errors.Is(err, zk.ErrNodeExists) {
				return err
			}
		}
	}
}

// queue waits until the attempt's znode is the first child. It watches only
// its predecessor: a deletion wakes one waiter, not the herd.
func (a *attempt) queue(ctx context.Context, n node) (*Lease, error) {
	s := a.s
	for {
		v, err := s.waitUp(ctx)
		if err != nil {
			return nil, err
		}
		if n.owner != 0 && v.id != n.owner {
			return nil, errVanished
		}
		// While the session answered a request through the leader at
		// most TTL/8 ago (the create just now, or another grant's), the
		// listing is the member's alone, one round trip, and a grant on
		// it is dated from that request, as on a deletion event
		// (grantFresh). Else the sync first, through the leader: a
		// listing that shows the znode first then grants the lock,
		// dated from sent, which must not rest on a copy of a member
		// cut off from the leader (the leader may have expired the
		// session since). Either listing is a state at least as new as
		// the create (read your writes; after a reconnect, the server
		// refuses a client that saw newer zxids than it has), so a
		// znode missing from it is gone.
		_, fresh := a.fresh(v.epoch)
		sent := time.Now()
		var children []string
		if !fresh {
			children, err = run(s, func(c *zk.Conn) ([]string, error) {
				if _, err := c.Sync(a.dir); err != nil {
					return nil, err
				}
				ch, _, err := c.Children(a.dir)
				return ch, err
			})
		} else {
			children, _, err = s.conn.Children(a.dir) // not through run: see GetW below
		}
		if transient(err) {
			a.pause(ctx, v)
			continue
		}
		if err == nil && !s.still(v.epoch) {
			continue
		}
		if errors.Is(err, zk.ErrNoNode) {
			return nil, errVanished
		}
		if err != nil {
			return nil, err
		}
		pred, head, found := predecessor(children, n.name)
		if !found {
			return nil, errVanished
		}
		if n.owner == 0 {
			// The create's reply came in another epoch than its request
			// went out in: the znode may belong to a session that has
			// expired since, and be about to go with it.
			_, st, err := s.conn.Get(a.dir + "/" + n.name) // not through run: see GetW below
			if errors.Is(err, zk.ErrNoNode) {
				return nil, errVanished
			}
			if transient(err) {
				a.pause(ctx, v)
				continue
			}
			if err != nil {
				return nil, err
			}
			n.owner = st.EphemeralOwner
			continue // and check it against the session now up
		}
		if pred == "" {
			var lease *Lease
			if !fresh {
				lease = a.grant(n, sent, v.epoch)
			} else {
				lease = a.grantFresh(n, v.epoch)
			}
			if lease != nil {
				return lease, nil
			}
			continue // the epoch ended, or the session is no longer fresh: sync
		}
		if !a.wait {
			return nil, locks.ErrNotObtained
		}
		// Not through run: a read the member answers alone proves nothing
		// of the session at the leader, so it must not date a grant
		// (grantFresh).
		_, _, watch, err := s.conn.GetW(a.dir + "/" + pred)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if transient(err) {
			a.pause(ctx, v)
			continue
		}
		if err != nil {
			return nil, err
		}
		select {
		case ev := <-watch:
			if ev.Type == zk.EventNodeDeleted && head {
				// The holder is gone and nothing can have queued ahead of
				// us since the listing: the lock is ours without another
				// read, if the session is fresh enough to date the lease.
				if lease := a.grantFresh(n, v.epoch); lease != nil {
					return lease, nil
				}
				// It waited longer than that: a sync through the leader,
				// answered in this epoch, dates it anew — the event
				// proves the turn, the listing would add nothing. A
				// waiter frozen while its session expired gets no answer
				// (the session is gone at the leader) and lists again.
				if _, err := run(s, func(c *zk.Conn) (string, error) { return c.Sync(a.dir) }); err == nil {
					if lease := a.grantFresh(n, v.epoch); lease != nil {
						return lease, nil
					}
				}
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// pause waits a little after a failure that did not end epoch v, so that
// retrying cannot spin.
func (a *attempt) pause(ctx context.Context, v view) {
	t := time.NewTimer(50 * time.Millisecond)
	defer t.Stop()
	select {
	case <-v.changed:
	case <-t.C:
	case <-ctx.Done():
	}
}

// predecessor returns the child just before name in sequence order, and
// whether that child is the first one (the holder). Sequence numbers are
// compared with wrap-around (serial number) arithmetic: ZooKeeper's counter
// is a signed 32-bit number that goes negative after 2³¹ changes of the
// key's children, and the live znodes of one queue are always within a far
// smaller window of it.
func predecessor(children []string, name string) (pred string, head, found bool) {
	my, ok := seq(name)
	if !ok {
		return "", false, false
	}
	var best, lowest int32
	first := true
	for _, c := range children {
		q, ok := seq(c)
		if !ok {
			continue
		}
		if c == name {
			found = true
		}
		if first || before(q, lowest) {
			lowest, first = q, false
		}
		if before(q, my) && (pred == "" || before(best, q)) {
			pred, best = c, q
		}
	}
	return pred, pred != "" && best == lowest, found
}

// before orders sequence numbers across the counter's wrap.
func before(a, b int32) bool { return int32(uint32(a)-uint32(b)) < 0 }

// seq parses the sequence number ZooKeeper appends to a sequential znode's
// name: "%010d" of a signed 32-bit counter, so ten digits, or a sign and
// nine or ten digits once it wrapped. Names here are a random part of
// letters and digits, a '-', then the number.
func seq(name string) (int32, bool) {
	num := name
	if i := strings.IndexByte(name, '-'); i >= 0 {
		num = name[i+1:]
	} else if len(name) >= 10 {
		num = name[len(name)-10:]
	}
	if len(num) < 10 {
		return 0, false
	}
	n, err := strconv.ParseInt(num, 10, 32)
	return int32(n), err == nil
}
