package zklock_test

import (
	"context"
	"encoding/binary"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/zklock"
)

// recorder is a Dialer that records the opcode of every request its
// connections send (go-zookeeper writes one packet per Write: length, xid,
// opcode, …), pings left out.
type recorder struct {
	mu  sync.Mutex
	ops []string
}

func (r *recorder) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &recordedConn{Conn: c, r: r}, nil
}

// take returns the requests sent since the last take.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ops := r.ops
	r.ops = nil
	return ops
}

type recordedConn struct {
	net.Conn
	r         *recorder
	handshook bool // the first write is the connect request, which has no opcode
}

var opNames = map[int32]string{1: "create", 2: "delete", 3: "exists", 4: "getData", 5: "setData",
	8: "getChildren", 9: "sync", 12: "getChildren2", 14: "multi", 19: "createContainer"}

func (c *recordedConn) Write(p []byte) (int, error) {
	if !c.handshook {
		c.handshook = true
	} else if len(p) >= 12 && int32(binary.BigEndian.Uint32(p[4:8])) != -2 {
		op := int32(binary.BigEndian.Uint32(p[8:12]))
		name, ok := opNames[op]
		if !ok {
			name = "op" + strconv.Itoa(int(op))
		}
		c.r.mu.Lock()
		c.r.ops = append(c.r.ops, name)
		c.r.mu.Unlock()
	}
	return c.Conn.Write(p)
}

// The requests of a hand-off, counted on the wire. H holds; W1 queues
// behind it, W2 behind W1 (its listing shows W1 not first, so W1's
// deletion alone does not prove W2's turn). Queueing costs the create and
// one listing (no sync: the create just went through the leader), then the
// predecessor's watch; W1 takes the lock from H's deletion event with no
// request; W2, woken by W1's deletion, lists once (no sync: its session
// answered a write through the leader just before) and holds.
func TestHandOffRoundTrips(t *testing.T) {
	t.Parallel()
	srv := zkserver.New(t) // its own: the watch count below is ours alone
	addrs := []string{srv.Addr()}
	const prefix, key, ttl = "/locks", "k", 10 * time.Second
	c := inspect(t, addrs)
	ctx := ctxFor(t, time.Minute)
	h, err := newLocker(t, addrs, prefix).Acquire(ctx, key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lease locks.Lease
		err   error
	}
	waiter := func(want int) (*zklock.Locker, *recorder, chan result) {
		r := &recorder{}
		l, err := zklock.New(addrs, zklock.Options{Prefix: prefix, Logger: quiet{}, Dialer: r.dial})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		// Open the session first, so that the acquire's requests are all
		// that is recorded.
		warm, err := l.Acquire(ctx, "warm", ttl)
		if err != nil {
			t.Fatal(err)
		}
		if err := warm.Release(ctx); err != nil {
			t.Fatal(err)
		}
		r.take()
		got := make(chan result, 1)
		go func() {
			lease, err := l.Acquire(ctx, key, ttl)
			got <- result{lease, err}
		}()
		eventually(t, 20*time.Second, "the waiter queued and watching", func() bool {
			return len(children(t, c, prefix, key)) == want && watchCount(t, srv.Addr()) >= want-1
		})
		if ops, queue := r.take(), []string{"multi", "getChildren2", "getData"}; !slices.Equal(ops, queue) {
			t.Errorf("queueing sent %v; want %v", ops, queue)
		}
		return l, r, got
	}
	_, r1, got1 := waiter(2)
	l2, r2, got2 := waiter(3)

	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w1 := <-got1
	if w1.err != nil {
		t.Fatal(w1.err)
	}
	if ops := r1.take(); len(ops) != 0 {
		t.Errorf("W1, woken by the holder's deletion, sent %v before holding; want nothing", ops)
	}
	// A write of W2's session through the leader, just before the hand-off.
	other, err := l2.Acquire(ctx, "other", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r2.take()
	if err := w1.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w2 := <-got2
	if w2.err != nil {
		t.Fatal(w2.err)
	}
	defer w2.lease.Release(context.Background())
	if ops, want := r2.take(), []string{"getChildren2"}; !slices.Equal(ops, want) {
		t.Errorf("W2, woken by W1's deletion, sent %v before holding; want %v", ops, want)
	}
	if !(h.Token() < w1.lease.Token() && w1.lease.Token() < w2.lease.Token()) {
		t.Errorf("tokens %d, %d, %d do not increase", h.Token(), w1.lease.Token(), w2.lease.Token())
	}
	if err := w2.lease.Renew(ctx); err != nil {
		t.Errorf("W2's lease is not held: %v", err)
	}
}

// A waiter behind the holder that waited longer than TTL/8 (so no request
// of its session through the leader is recent enough to date a lease by)
// takes the lock from the deletion event and one sync, which dates the
// lease: no listing.
func TestHandOffAfterLongWait(t *testing.T) {
	t.Parallel()
	srv := zkserver.New(t) // its own: the watch count below is ours alone
	addrs := []string{srv.Addr()}
	const prefix, key, ttl = "/locks", "k", time.Second
	c := inspect(t, addrs)
	ctx := ctxFor(t, time.Minute)
	h, err := newLocker(t, addrs, prefix).Acquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	l, err := zklock.New(addrs, zklock.Options{Prefix: prefix, Logger: quiet{}, Dialer: r.dial})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	type result struct {
		lease locks.Lease
		err   error
	}
	got := make(chan result, 1)
	go func() {
		lease, err := l.Acquire(ctx, key, ttl)
		got <- result{lease, err}
	}()
	eventually(t, 20*time.Second, "the waiter queued and watching", func() bool {
		return len(children(t, c, prefix, key)) == 2 && watchCount(t, srv.Addr()) >= 1
	})
	time.Sleep(3 * ttl / 8) // past TTL/8 since the waiter's create
	r.take()
	released := time.Now()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-got
	if w.err != nil {
		t.Fatal(w.err)
	}
	defer w.lease.Release(context.Background())
	if ops, want := r.take(), []string{"sync"}; !slices.Equal(ops, want) {
		t.Errorf("the waiter, woken by the holder's deletion, sent %v before holding; want %v", ops, want)
	}
	if d := w.lease.Deadline(); !d.After(released.Add(ttl)) {
		t.Errorf("deadline %v is not dated after the release (%v) plus the TTL", d, released)
	}
	if w.lease.Token() <= h.Token() {
		t.Errorf("token %d is not above the holder's %d", w.lease.Token(), h.Token())
	}
	if err := w.lease.Renew(ctx); err != nil {
		t.Errorf("the waiter's lease is not held: %v", err)
	}
}
