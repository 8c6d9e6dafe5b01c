// Package rnotify shares one Redis pub/sub connection among the blocked
// acquires of a locker. A waiter registers an id on a channel; a message
// whose payload is that id, or that id followed by "|" and a value, wakes
// that waiter only and hands it the value; the payload [Everyone] wakes
// every waiter on the channel.
//
// [New] takes the connection and its decoding as functions ([Client]);
// [ForGoRedis] supplies them for a go-redis client.
package rnotify

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"
)

// Everyone is the payload that wakes every waiter on a channel.
const Everyone = "*"

// ErrClosed is returned by Register after Close.
var ErrClosed = errors.New("notifier closed")

// PubSub is one pub/sub connection. go-redis's *redis.PubSub satisfies it.
// Receive returns the next message, confirmation or reply, which the
// Client's Decode reads.
type PubSub interface {
	Subscribe(ctx context.Context, channels ...string) error
	Unsubscribe(ctx context.Context, channels ...string) error
	Receive(ctx context.Context) (any, error)
	Close() error
}

// Event is what Decode makes of something Receive returned.
type Event struct {
	// Message: Payload was published on Channel.
	Message bool
	// Subscribed: the server confirmed a SUBSCRIBE of Channel.
	Subscribed bool
	Channel    string
	Payload    string
}

// Client is what a Notifier needs of a Redis client: Open opens the
// pub/sub connection (with go-redis: client.Subscribe(ctx)), Decode reads
// what its Receive returns (anything else than a message or a subscribe
// confirmation is the zero Event, and ignored).
type Client struct {
	Open   func(ctx context.Context) PubSub
	Decode func(msg any) Event
}

// Notifier dispatches pub/sub messages to waiters. It starts one reader
// goroutine on first use; Close stops it and waits for it.
type Notifier struct {
	client Client
	done   chan struct{} // closed by Close
	exited chan struct{} // closed when the reader returns

	mu      sync.Mutex
	ps      PubSub                     // guarded by mu; nil until first needed
	closed  bool                       // guarded by mu
	pending map[string][]chan struct{} // guarded by mu; confirmations awaited, in SUBSCRIBE order
	waiters map[string]chan string     // guarded by mu; waiter id → its wake-up
	byChan  map[string]map[string]bool // guarded by mu; channel → waiter ids (present while it has some)
}

// readyLocked reports whether channel has waiters and its latest SUBSCRIBE
// is confirmed: every SUBSCRIBE sent for it has been answered.
func (n *Notifier) readyLocked(channel string) bool {
	return len(n.byChan[channel]) > 0 && len(n.pending[channel]) == 0
}

// New returns a Notifier on c.
func New(c Client) *Notifier {
	return &Notifier{
		client:  c,
		done:    make(chan struct{}),
		exited:  make(chan struct{}),
		pending: map[string][]chan struct{}{},
		waiters: map[string]chan string{},
		byChan:  map[string]map[string]bool{},
	}
}

// Done is closed by Close.
func (n *Notifier) Done() <-chan struct{} { return n.done }

// Register makes id receive wake-ups published on channel, and returns
// once the server has confirmed the subscription. A wake-up carries the
// value published after the id ("" for none). Only the latest undelivered
// wake-up is kept.
func (n *Notifier) Register(ctx context.Context, channel, id string) (<-chan string, error) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, ErrClosed
	}
	if n.ps == nil {
		n.ps = n.client.Open(context.WithoutCancel(ctx))
		go n.read(n.ps)
	}
	wake := make(chan string, 1)
	n.waiters[id] = wake
	first := n.byChan[channel] == nil
	if first {
		n.byChan[channel] = map[string]bool{}
	}
	n.byChan[channel][id] = true
	var confirmed chan struct{}
	switch {
	case first:
		confirmed = make(chan struct{})
		n.pending[channel] = append(n.pending[channel], confirmed)
		if err := n.ps.Subscribe(ctx, channel); err != nil {
			// Not sent: no confirmation will come for it.
			if p := n.pending[channel]; len(p) == 1 {
				delete(n.pending, channel)
			} else {
				n.pending[channel] = p[:len(p)-1]
			}
			n.unregisterLocked(channel, id)
			n.mu.Unlock()
			return nil, err
		}
	case len(n.pending[channel]) > 0: // subscribed, not yet confirmed
		p := n.pending[channel]
		confirmed = p[len(p)-1]
	}
	n.mu.Unlock()
	if confirmed != nil {
		select {
		case <-confirmed:
		case <-n.done:
			n.Unregister(channel, id)
			return nil, ErrClosed
		case <-ctx.Done():
			n.Unregister(channel, id)
			return nil, ctx.Err()
		}
	}
	return wake, nil
}

// Subscribed reports whether channel is subscribed and confirmed already
// (other local waiters listen on it), so registering costs no round trip.
func (n *Notifier) Subscribed(channel string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.readyLocked(channel)
}

// Unregister undoes Register.
func (n *Notifier) Unregister(channel, id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.unregisterLocked(channel, id)
}

func (n *Notifier) unregisterLocked(channel, id string) {
	delete(n.waiters, id)
	delete(n.byChan[channel], id)
	if len(n.byChan[channel]) > 0 {
		return
	}
	delete(n.byChan, channel)
	if !n.closed {
		// Best effort: a failure leaves a subscription that costs only
		// unmatched messages.
		_ = n.ps.Unsubscribe(context.Background(), channel)
	}
}

// read dispatches messages until the notifier closes.
func (n *Notifier) read(ps PubSub) {
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
		switch m := n.client.Decode(msg); {
		case m.Message:
			n.mu.Lock()
			if m.Payload == Everyone {
				for id := range n.byChan[m.Channel] {
					poke(n.waiters[id], "")
				}
			} else {
				id, val, _ := strings.Cut(m.Payload, "|")
				if w := n.waiters[id]; w != nil {
					poke(w, val)
				}
			}
			n.mu.Unlock()
		case m.Subscribed:
			n.mu.Lock()
			if p := n.pending[m.Channel]; len(p) > 0 {
				close(p[0])
				if len(p) == 1 {
					delete(n.pending, m.Channel)
				} else {
					n.pending[m.Channel] = p[1:]
				}
			}
			n.mu.Unlock()
		}
	}
}

// poke delivers v, replacing an undelivered older wake-up: the latest
// carries the news (a grant's token).
func poke(w chan string, v string) {
	for {
		select {
		case w <- v:
			return
		default:
		}
		select {
		case <-w:
		default:
		}
	}
}

func (n *Notifier) wakeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, w := range n.waiters {
		select {
		case w <- "": // never displaces a pending wake-up's value
		default:
		}
	}
}

// Close stops the reader and waits for it. It is idempotent.
func (n *Notifier) Close() {
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
