package redislock

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// notifier shares one pub/sub connection among a Locker's blocked
// acquires. A release publishes the id of the waiter whose turn it is; the
// reader goroutine wakes that waiter only, so a release costs the other
// waiters nothing.
type notifier struct {
	client Client
	done   chan struct{} // closed by close
	exited chan struct{} // closed when the reader returns

	mu      sync.Mutex
	ps      *redis.PubSub              // guarded by mu; nil until first needed
	closed  bool                       // guarded by mu
	refs    map[string]int             // guarded by mu; channel → local waiters
	ready   map[string]bool            // guarded by mu; channel → subscription confirmed
	pending map[string][]chan struct{} // guarded by mu; confirmations awaited, in SUBSCRIBE order
	waiters map[string]chan struct{}   // guarded by mu; waiter id → its wake-up
}

func newNotifier(c Client) *notifier {
	return &notifier{
		client:  c,
		done:    make(chan struct{}),
		exited:  make(chan struct{}),
		refs:    map[string]int{},
		ready:   map[string]bool{},
		pending: map[string][]chan struct{}{},
		waiters: map[string]chan struct{}{},
	}
}

// register makes id receive wake-ups published on channel, and returns
// once the server has confirmed the subscription.
func (n *notifier) register(ctx context.Context, channel, id string) (<-chan struct{}, error) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, ErrClosed
	}
	if n.ps == nil {
		n.ps = n.client.Subscribe(context.WithoutCancel(ctx))
		go n.read(n.ps)
	}
	wake := make(chan struct{}, 1)
	n.waiters[id] = wake
	n.refs[channel]++
	var confirmed chan struct{}
	switch {
	case n.refs[channel] == 1:
		confirmed = make(chan struct{})
		n.pending[channel] = append(n.pending[channel], confirmed)
		if err := n.ps.Subscribe(ctx, channel); err != nil {
			n.unregisterLocked(channel, id)
			n.mu.Unlock()
			return nil, err
		}
	case !n.ready[channel]:
		p := n.pending[channel]
		confirmed = p[len(p)-1]
	}
	n.mu.Unlock()
	if confirmed != nil {
		select {
		case <-confirmed:
		case <-n.done:
			n.unregister(channel, id)
			return nil, ErrClosed
		case <-ctx.Done():
			n.unregister(channel, id)
			return nil, ctx.Err()
		}
	}
	return wake, nil
}

func (n *notifier) unregister(channel, id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.unregisterLocked(channel, id)
}

func (n *notifier) unregisterLocked(channel, id string) {
	delete(n.waiters, id)
	n.refs[channel]--
	if n.refs[channel] > 0 {
		return
	}
	delete(n.refs, channel)
	delete(n.ready, channel)
	if !n.closed {
		// Best effort: a failure leaves a subscription that costs only
		// unmatched messages.
		_ = n.ps.Unsubscribe(context.Background(), channel)
	}
}

// read dispatches messages until the notifier closes.
func (n *notifier) read(ps *redis.PubSub) {
	defer close(n.exited)
	backoff := 10 * time.Millisecond
	for {
		msg, err := ps.Receive(context.Background())
		if err != nil {
			select {
			case <-n.done:
				return
			default:
			}
			// The connection broke; go-redis redials and resubscribes on
			// the next Receive. Wake-ups may have been lost meanwhile, so
			// every waiter checks again.
			n.wakeAll()
			select {
			case <-n.done:
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
		switch m := msg.(type) {
		case *redis.Message:
			n.mu.Lock()
			if w := n.waiters[m.Payload]; w != nil {
				select {
				case w <- struct{}{}:
				default:
				}
			}
			n.mu.Unlock()
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			n.mu.Lock()
			if p := n.pending[m.Channel]; len(p) > 0 {
				close(p[0])
				if len(p) == 1 {
					delete(n.pending, m.Channel)
				} else {
					n.pending[m.Channel] = p[1:]
				}
			}
			if n.refs[m.Channel] > 0 {
				n.ready[m.Channel] = true
			}
			n.mu.Unlock()
		}
	}
}

func (n *notifier) wakeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, w := range n.waiters {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

func (n *notifier) close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		<-n.exited
		return
	}
	n.closed = true
	close(n.done)
	ps := n.ps
	n.mu.Unlock()
	if ps == nil {
		close(n.exited)
		return
	}
	_ = ps.Close()
	<-n.exited
}
