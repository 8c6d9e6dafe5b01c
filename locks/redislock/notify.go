package redislock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/locks/redislock/internal/rnotify"
)

// waker is what a Locker's blocked acquires wait on: an [rnotify.Notifier],
// or on a Cluster a [masterNotifier] of them.
type waker interface {
	Register(ctx context.Context, channel, id string) (<-chan string, error)
	Unregister(channel, id string)
	Subscribed(channel string) bool
	Done() <-chan struct{}
	Close()
}

// notifier returns the shared pub/sub reader of c's blocked acquires: on a
// Cluster client one per master (see masterNotifier), else one.
func notifier(c Client) waker {
	if mc, ok := c.(masterRouter); ok {
		return newMasterNotifier(mc, c)
	}
	return rnotify.ForGoRedis(c)
}

// masterRouter is a [redis.ClusterClient]'s MasterForKey.
type masterRouter interface {
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
}

// notifierLinger is how long a master's subscriber stays open with no
// waiter on it.
var notifierLinger = 10 * time.Second

// masterNotifier subscribes each waiter's channel on the master that owns
// the channel's slot — the master whose scripts publish on it (a lock's
// channel shares its keys' hash tag): one subscriber per master. A Cluster
// delivers a PUBLISH to the publishing node's subscribers at once and to
// every other node's over the cluster bus, a hop that under many contended
// keys delays hand-overs (docs/design.md, "redislock").
//
// Routing is an optimisation, never a condition of correctness: the
// channels are ordinary (not sharded) ones, so a message reaches a
// subscriber on any node, only later. Each waiter is routed when it
// registers, by the client's slot map as it is then, so after a failover
// or a slot's move (which reload the map) new waiters subscribe on the new
// master while those already waiting keep their subscription. A waiter
// also re-checks the lock on its own timer (the lock's remaining TTL, its
// queue heartbeat), as everywhere.
type masterNotifier struct {
	router   masterRouter
	fallback Client // subscribes where the slot map cannot say (any node)
	done     chan struct{}
	exited   chan struct{} // closed when Close has stopped every reader

	lingered sync.WaitGroup // subscribers closing after their linger

	mu     sync.Mutex
	closed bool                     // guarded by mu
	byAddr map[string]*nodeNotifier // guarded by mu; one per master address
	byID   map[string]*nodeNotifier // guarded by mu; waiter id → where it registered
}

type nodeNotifier struct {
	addr    string
	n       *rnotify.Notifier
	waiters int         // guarded by masterNotifier.mu
	linger  *time.Timer // guarded by masterNotifier.mu: set while idle
}

func newMasterNotifier(r masterRouter, fallback Client) *masterNotifier {
	return &masterNotifier{
		router: r, fallback: fallback, done: make(chan struct{}), exited: make(chan struct{}),
		byAddr: map[string]*nodeNotifier{}, byID: map[string]*nodeNotifier{},
	}
}

// fallbackAddr keys the subscriber of channels no master could be found
// for.
const fallbackAddr = ""

// Register implements waker: the waiter subscribes on the master the slot
// map names for channel now.
func (m *masterNotifier) Register(ctx context.Context, channel, id string) (<-chan string, error) {
	// Before the lock: it loads the slot map when the client has none.
	node, err := m.router.MasterForKey(ctx, channel)
	if err != nil {
		node = nil // the fallback's subscriber
	}
	wake, err := m.registerOn(ctx, node, channel, id)
	if err != nil && node != nil && !errors.Is(err, rnotify.ErrClosed) && ctx.Err() == nil {
		// The master the map named did not take the subscription (it
		// died, say, and the map is stale): subscribe through the
		// client, which routes by its map then, and have the map
		// reloaded for the next waiter.
		reloadOnNetError(ctx, m.fallback, err)
		wake, err = m.registerOn(ctx, nil, channel, id)
	}
	return wake, err
}

// registerOn registers id on node's subscriber, or the fallback's when
// node is nil.
func (m *masterNotifier) registerOn(ctx context.Context, node *redis.Client, channel, id string) (<-chan string, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, rnotify.ErrClosed
	}
	addr, src := fallbackAddr, rnotify.Subscriber(m.fallback)
	if node != nil {
		addr, src = node.Options().Addr, node
	}
	nn := m.byAddr[addr]
	if nn == nil {
		nn = &nodeNotifier{addr: addr, n: rnotify.ForGoRedis(src)}
		m.byAddr[addr] = nn
	}
	if nn.linger != nil {
		nn.linger.Stop()
		nn.linger = nil
	}
	nn.waiters++
	m.byID[id] = nn
	m.mu.Unlock()
	wake, err := nn.n.Register(ctx, channel, id)
	if err != nil {
		m.mu.Lock()
		m.leaveLocked(id)
		m.mu.Unlock()
	}
	return wake, err
}

// Unregister implements waker.
func (m *masterNotifier) Unregister(channel, id string) {
	m.mu.Lock()
	nn := m.byID[id]
	m.mu.Unlock()
	if nn == nil {
		return
	}
	nn.n.Unregister(channel, id)
	m.mu.Lock()
	m.leaveLocked(id)
	m.mu.Unlock()
}

// leaveLocked counts waiter id out; a subscriber's last waiter starts its
// linger, after which an idle subscriber closes (a master that failed over
// or left the cluster keeps no reader redialling it).
func (m *masterNotifier) leaveLocked(id string) {
	nn := m.byID[id]
	if nn == nil {
		return
	}
	delete(m.byID, id)
	if nn.waiters--; nn.waiters > 0 || m.closed {
		return
	}
	nn.linger = time.AfterFunc(notifierLinger, func() {
		m.mu.Lock()
		if m.closed || nn.waiters > 0 || m.byAddr[nn.addr] != nn {
			m.mu.Unlock()
			return
		}
		delete(m.byAddr, nn.addr)
		m.lingered.Add(1)
		m.mu.Unlock()
		defer m.lingered.Done()
		nn.n.Close()
	})
}

// Subscribed implements waker: some subscriber listens on channel already
// (confirmed), so the first waiter need not try before registering.
func (m *masterNotifier) Subscribed(channel string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, nn := range m.byAddr {
		if nn.waiters > 0 && nn.n.Subscribed(channel) {
			return true
		}
	}
	return false
}

// Done implements waker: closed by Close.
func (m *masterNotifier) Done() <-chan struct{} { return m.done }

// Close implements waker: it closes every subscriber and waits for their
// readers. It is idempotent.
func (m *masterNotifier) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		<-m.exited
		return
	}
	m.closed = true
	close(m.done)
	all := make([]*nodeNotifier, 0, len(m.byAddr))
	for _, nn := range m.byAddr {
		if nn.linger != nil {
			nn.linger.Stop()
		}
		all = append(all, nn)
	}
	m.mu.Unlock()
	for _, nn := range all {
		nn.n.Close()
	}
	m.lingered.Wait()
	close(m.exited)
}
