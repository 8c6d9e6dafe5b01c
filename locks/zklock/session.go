package zklock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// go-zookeeper logs this line, with the session id and the timeout the server
// granted, right after every successful handshake; it exposes the timeout
// nowhere else. The session counts as up from then on.
const authenticatedFormat = "authenticated: id=%d, timeout=%d"

// session is one ZooKeeper connection and its session, shared by every
// acquire of one TTL.
//
// An epoch is a stretch of time during which the connection was up without a
// break. It changes when the session comes up and when it goes down, so two
// equal readings of it bracket a time when the session certainly lived:
// go-zookeeper delivers replies only while the connection is up, and reports
// the loss of a connection only after its last reply.
type session struct {
	l       *Locker
	ttl     time.Duration // the leases' TTL; the timeout asked for is ttl + Options.LockDelay
	conn    *zk.Conn      // set once dialled; nil if dialling failed
	events  <-chan zk.Event
	dialed  chan struct{} // closed when conn (or dialErr) is set
	dialErr error

	mu       sync.Mutex
	up       bool                // guarded by mu
	id       int64               // guarded by mu; the session id while up
	timeout  time.Duration       // guarded by mu; the negotiated timeout while up
	epoch    uint64              // guarded by mu
	lastGood time.Time           // guarded by mu; send time of the latest request answered in this epoch through the leader (a write or a sync)
	changed  chan struct{}       // guarded by mu; closed and replaced at every epoch change
	closed   bool                // guarded by mu
	leases   map[*Lease]struct{} // guarded by mu; granted and not yet ended
}

func newSession(l *Locker, ttl time.Duration) *session {
	return &session{
		l:       l,
		ttl:     ttl,
		dialed:  make(chan struct{}),
		changed: make(chan struct{}),
		leases:  map[*Lease]struct{}{},
	}
}

// dial connects; the handshake goes on in go-zookeeper's own goroutine.
func (s *session) dial() {
	defer close(s.dialed)
	conn, events, err := zk.Connect(s.l.servers, s.ttl+s.l.o.LockDelay,
		zk.WithDialer(s.l.o.Dialer),
		zk.WithLogger(s),
		zk.WithLogInfo(true), // for authenticatedFormat; Printf forwards the rest
		zk.WithEventCallback(s.onEvent),
	)
	if err != nil {
		s.dialErr = err
		return
	}
	s.conn, s.events = conn, events
	// Credentials go before any request that may need them. go-zookeeper
	// keeps them for reconnects only once the server accepted them.
	for _, a := range s.l.o.Auth {
		for {
			err := conn.AddAuth(a.Scheme, a.Credentials)
			if err == nil {
				break
			}
			if !transient(err) || s.l.bg.Err() != nil {
				s.dialErr = fmt.Errorf("zklock: adding %s credentials: %w", a.Scheme, err)
				return
			}
			select {
			case <-time.After(100 * time.Millisecond):
			case <-s.l.bg.Done():
			}
		}
	}
}

// Printf implements zk.Logger: it watches for the handshake line and passes
// everything on to the configured logger.
func (s *session) Printf(format string, args ...any) {
	if format == authenticatedFormat && len(args) == 2 {
		id, ok1 := args[0].(int64)
		ms, ok2 := args[1].(int32)
		if ok1 && ok2 {
			s.setUp(id, time.Duration(ms)*time.Millisecond)
		}
	}
	if s.l.o.Logger != nil {
		s.l.o.Logger.Printf(format, args...)
	}
}

// onEvent runs in go-zookeeper's goroutines and must not block.
func (s *session) onEvent(ev zk.Event) {
	if ev.Type != zk.EventSession || ev.State == zk.StateHasSession {
		return // up is signalled by the handshake line, which carries the timeout
	}
	why := errDisconnected
	if ev.State == zk.StateExpired {
		why = errExpired
	}
	s.setDown(why)
}

func (s *session) setUp(id int64, timeout time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.up, s.id, s.timeout = true, id, timeout
	s.lastGood = time.Time{}
	s.bumpLocked()
}

func (s *session) setDown(why error) {
	s.mu.Lock()
	if !s.up {
		s.mu.Unlock()
		return
	}
	s.up = false
	s.lastGood = time.Time{}
	s.bumpLocked()
	lost := s.takeLeasesLocked()
	s.mu.Unlock()
	for _, le := range lost {
		le.lose(why, false)
	}
}

func (s *session) bumpLocked() {
	s.epoch++
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *session) takeLeasesLocked() []*Lease {
	out := make([]*Lease, 0, len(s.leases))
	for le := range s.leases {
		out = append(out, le)
	}
	clear(s.leases)
	return out
}

// view is what a caller needs to know of the session at one moment.
type view struct {
	up      bool
	epoch   uint64
	id      int64
	timeout time.Duration
	changed <-chan struct{}
}

func (s *session) view() view {
	s.mu.Lock()
	defer s.mu.Unlock()
	return view{s.up, s.epoch, s.id, s.timeout, s.changed}
}

// waitUp returns the session's view once it is up.
func (s *session) waitUp(ctx context.Context) (view, error) {
	select {
	case <-s.dialed:
	case <-ctx.Done():
		return view{}, ctx.Err()
	}
	if s.dialErr != nil {
		return view{}, s.dialErr
	}
	for {
		s.mu.Lock()
		v := view{s.up, s.epoch, s.id, s.timeout, s.changed}
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return view{}, errClosed
		}
		if v.up {
			return v, nil
		}
		select {
		case <-v.changed:
		case <-ctx.Done():
			return view{}, ctx.Err()
		}
	}
}

// answered records that a request sent at sent in epoch e got its reply.
// It reports whether the epoch is still e.
func (s *session) answered(e uint64, sent time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.up || s.epoch != e {
		return false
	}
	if sent.After(s.lastGood) {
		s.lastGood = sent
	}
	return true
}

// still reports whether the session is up in epoch e.
func (s *session) still(e uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.up && s.epoch == e
}

// register adds a granted lease, only if the session is still up in epoch e:
// from then on a loss of the session reaches it.
func (s *session) register(le *Lease, e uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.up || s.epoch != e || s.closed {
		return false
	}
	s.leases[le] = struct{}{}
	return true
}

func (s *session) unregister(le *Lease) {
	s.mu.Lock()
	delete(s.leases, le)
	s.mu.Unlock()
}

// shutdown ends the session: its leases are lost (closing a session deletes
// its ephemeral znodes on the server) and the connection is closed.
func (s *session) shutdown() {
	s.mu.Lock()
	already := s.closed
	s.closed = true
	s.up = false
	if !already {
		s.bumpLocked()
	}
	lost := s.takeLeasesLocked()
	s.mu.Unlock()
	if already {
		return
	}
	for _, le := range lost {
		le.lose(errClosed, true)
	}
	<-s.dialed
	if s.conn == nil {
		return
	}
	s.conn.Close()
	// go-zookeeper closes the event channel when its last goroutine is done.
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case _, ok := <-s.events:
			if !ok {
				return
			}
		case <-timeout.C:
			return
		}
	}
}

// Errors that end a lease; they are wrapped with [locks.ErrNotHeld].
var (
	errDisconnected = errors.New("the ZooKeeper connection was lost, so the session may have expired")
	errExpired      = errors.New("the ZooKeeper session expired")
	errLapsed       = errors.New("the lease was not renewed before its deadline")
	errGone         = errors.New("the lock znode is gone")
)

// transient reports whether err is go-zookeeper's way of saying the
// connection broke (the outcome of the request is unknown) or could not be
// made: the call is worth repeating once the session is up again.
func transient(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) ||
		errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrSessionMoved)
}

// answer reports whether err came from the server, so the request reached it.
func answer(err error) bool {
	return err == nil || errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrNodeExists) ||
		errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNotEmpty)
}

// run makes one go-zookeeper call on s and records a reply as proof that the
// session lived when the request was sent. fn must go through the leader (a
// write, or a sync before its reads): a member cut off from the quorum
// answers reads alone, from its frozen copy, after the leader expired the
// session. The call blocks: go-zookeeper
// takes no context. It ends when the reply comes, or when go-zookeeper gives
// up on the connection (at once when it breaks, after two thirds of the
// session timeout when it goes silent); callers that must return when a
// context ends make their calls in a goroutine ([call]).
func run[T any](s *session, fn func(*zk.Conn) (T, error)) (T, error) {
	v := s.view()
	sent := time.Now()
	res, err := fn(s.conn)
	if v.up && answer(err) {
		s.answered(v.epoch, sent)
	}
	return res, err
}

// call runs fn, which makes blocking go-zookeeper calls, and returns when it
// does or when ctx ends. In the latter case fn goes on in a goroutine the
// Locker tracks, late (when set) gets its result, and call waits up to
// settle for fn to finish: an fn that watches ctx itself cleans up then. An
// unbounded ctx (no Done channel) costs no goroutine.
func call[T any](ctx context.Context, l *Locker, fn func() (T, error), late func(T, error), settle time.Duration) (T, error) {
	if ctx.Done() == nil {
		return fn()
	}
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	type result struct {
		v   T
		err error
	}
	var (
		mu        sync.Mutex
		abandoned bool
		ch        = make(chan result, 1)
		done      = make(chan struct{})
	)
	if !l.spawn(func() {
		defer close(done)
		v, err := fn()
		mu.Lock()
		if abandoned {
			mu.Unlock()
			if late != nil {
				late(v, err)
			}
			return
		}
		ch <- result{v, err}
		mu.Unlock()
	}) {
		return zero, errClosed
	}
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
	}
	mu.Lock()
	select {
	case r := <-ch: // it finished as ctx ended: the result is real
		mu.Unlock()
		return r.v, r.err
	default:
		abandoned = true
		mu.Unlock()
	}
	if settle > 0 {
		t := time.NewTimer(settle)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
		}
	}
	return zero, ctx.Err()
}

// removeNode deletes a znode of this session in the background, until it
// is gone or the session that owned it is (its ephemeral znodes go with it).
// owner 0 means the session now up.
func (s *session) removeNode(path string, owner int64) {
	s.retry(owner, func(c *zk.Conn) error {
		if err := c.Delete(path, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return err
		}
		return nil
	})
}

// removeAttempt deletes the children of dir named with prefix: the znode of
// an attempt whose create lost its reply, if the create was applied.
func (s *session) removeAttempt(dir, prefix string, owner int64) {
	s.retry(owner, func(c *zk.Conn) error {
		if _, err := c.Sync(dir); err != nil && !errors.Is(err, zk.ErrNoNode) { // see attempt.find
			return err
		}
		children, _, err := c.Children(dir)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, name := range children {
			if strings.HasPrefix(name, prefix) {
				if err := c.Delete(dir+"/"+name, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
					return err
				}
			}
		}
		return nil
	})
}

// retry runs op until it succeeds, fails for good, or the session that owned
// the znode (owner, 0 for the one now up) has ended. It runs in the
// background: the Locker's Close stops it.
func (s *session) retry(owner int64, op func(*zk.Conn) error) {
	ctx := s.l.bg
	for {
		v, err := s.waitUp(ctx)
		if err != nil {
			return
		}
		if owner == 0 {
			owner = v.id
		}
		if v.id != owner {
			return
		}
		err = op(s.conn)
		if err == nil || !transient(err) {
			if err != nil && s.l.o.Logger != nil {
				s.l.o.Logger.Printf("zklock: cleaning up: %v", err)
			}
			return
		}
		select { // the connection broke: wait for the next epoch
		case <-v.changed:
		case <-ctx.Done():
			return
		}
	}
}

func (s *session) String() string { return fmt.Sprintf("session(%v)", s.ttl) }
