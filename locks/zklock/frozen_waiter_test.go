package zklock_test

import (
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/zklock"
)

// freezer is a Dialer whose last connection can be frozen the way the
// network sees a stopped process: nothing goes out (no pings: the server
// expires the session), nothing is handed in (what the server sends waits
// in the socket), and the client's read and write deadlines do not run (a
// stopped process's timers do not fire either). Thaw hands the client what
// arrived, in order, but holds back the end of the connection until the
// client sends a request that is not a ping — so the client takes in the
// events that waited with its session still up, as a process resumed from
// SIGSTOP may, and finds out about the expiry only from its next request.
// That settles in one way the races a real SIGSTOP leaves open (the read
// deadline against the buffered event, the event against the end of the
// connection).
type freezer struct {
	mu   sync.Mutex
	last *frozenConn
}

func (f *freezer) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	fc := &frozenConn{Conn: c, thawed: make(chan struct{}), requested: make(chan struct{}), closed: make(chan struct{})}
	f.mu.Lock()
	f.last = fc
	f.mu.Unlock()
	return fc, nil
}

func (f *freezer) conn() *frozenConn {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

type frozenConn struct {
	net.Conn
	mu        sync.Mutex
	frozen    bool          // guarded by mu
	draining  bool          // guarded by mu; thawed, the end of the connection held back
	thawed    chan struct{} // closed by thaw
	requested chan struct{} // closed at the first request after thaw
	reqOnce   sync.Once
	closed    chan struct{}
	closeOnce sync.Once
}

func (c *frozenConn) freeze() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozen = true
	// The read in progress waits for data, with no deadline, as long as it
	// takes.
	c.Conn.SetReadDeadline(time.Time{})
}

func (c *frozenConn) thaw() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozen, c.draining = false, true
	close(c.thawed)
}

func (c *frozenConn) state() (frozen, draining bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frozen, c.draining
}

func (c *frozenConn) wait(ch chan struct{}) {
	select {
	case <-ch:
	case <-c.closed:
	}
}

func (c *frozenConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if frozen, _ := c.state(); frozen {
		c.wait(c.thawed)
	}
	if _, draining := c.state(); draining && err != nil {
		c.wait(c.requested)
	}
	return n, err
}

func (c *frozenConn) Write(p []byte) (int, error) {
	if frozen, _ := c.state(); frozen {
		c.wait(c.thawed)
	}
	if _, draining := c.state(); draining {
		// go-zookeeper writes one packet per call: length, xid, opcode,
		// ...; pings have xid -2. Pings go nowhere while the end of the
		// connection is held back (their broken pipe would give it away);
		// the first request goes out and lets the end through.
		if len(p) >= 8 && int32(binary.BigEndian.Uint32(p[4:8])) == -2 {
			return len(p), nil
		}
		defer c.reqOnce.Do(func() { close(c.requested) })
	}
	return c.Conn.Write(p)
}

func (c *frozenConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.frozen || c.draining {
		return nil
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *frozenConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.frozen || c.draining {
		return nil
	}
	return c.Conn.SetWriteDeadline(t)
}

func (c *frozenConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// Issue 15 §5, deterministically: the waiter's connection freezes while
// it watches its predecessor; the predecessor is deleted (the event waits
// in the socket), the server expires the waiter's session and deletes its
// znode, X acquires. Thawed, the waiter is handed the deletion event with
// its session seemingly up. It must not take that for its turn: Acquire
// must not return while X holds, and the lease it returns after X is a
// real grant with a larger token. See TestFrozenWaiter for the same with
// the waiter's process stopped for real.
func TestWaiterHandedStaleDeletion(t *testing.T) {
	t.Parallel()
	srv := zkserver.New(t) // its own: the watch count below is ours alone
	addrs := []string{srv.Addr()}
	const prefix, key = "/locks", "k"
	dir := prefix + "/" + key
	c := inspect(t, addrs)
	ctx := ctxFor(t, time.Minute)
	h, err := newLocker(t, addrs, prefix).Acquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fr := &freezer{}
	wl, err := zklock.New(addrs, zklock.Options{Prefix: prefix, Logger: quiet{}, Dialer: fr.dial})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = wl.Close() })
	const ttl = time.Second // the server's minimum session timeout
	type result struct {
		lease locks.Lease
		err   error
	}
	got := make(chan result, 1)
	go func() {
		lease, err := wl.Acquire(ctx, key, ttl)
		got <- result{lease, err}
	}()
	var waiterNode string
	eventually(t, 20*time.Second, "the waiter queued and watching", func() bool {
		ch := children(t, c, prefix, key)
		if len(ch) != 2 {
			return false
		}
		for _, n := range ch {
			if dir+"/"+n != h.(*zklock.Lease).Path() {
				waiterNode = n
			}
		}
		return watchCount(t, srv.Addr()) >= 1
	})
	conn := fr.conn()
	conn.freeze()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the frozen waiter's session expired", func() bool {
		ok, _, err := c.Exists(dir + "/" + waiterNode)
		return err == nil && !ok
	})
	x, err := newLocker(t, addrs, prefix).Acquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn.thaw()

	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case r := <-got:
			if r.err == nil {
				t.Fatalf("the thawed waiter got a lease (token %d) while X (token %d) holds the lock", r.lease.Token(), x.Token())
			}
			t.Fatalf("the thawed waiter failed while X holds the lock: %v", r.err)
		case <-tick.C:
			if len(children(t, c, prefix, key)) == 2 {
				break wait // X's znode and the waiter's new one
			}
		case <-deadline:
			t.Fatal("the thawed waiter neither queued again nor returned")
		}
	}
	if err := x.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter was not granted after X released")
	}
	if r.err != nil {
		t.Fatalf("the waiter: %v", r.err)
	}
	defer r.lease.Release(ctx)
	if r.lease.Token() <= x.Token() {
		t.Fatalf("the waiter's token %d is not above X's %d", r.lease.Token(), x.Token())
	}
	p := r.lease.(*zklock.Lease).Path()
	_, st, err := c.Get(p)
	if err != nil || uint64(st.Czxid) != uint64(r.lease.Token()) {
		t.Fatalf("the waiter's znode %s: %v, %v; want Czxid %d", p, st, err, r.lease.Token())
	}
	if err := r.lease.Renew(ctx); err != nil {
		t.Fatalf("the waiter's lease is not held: %v", err)
	}
}

// watchCount returns the server's zk_watch_count (mntr).
func watchCount(t *testing.T, addr string) int {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(conn, "mntr"); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "zk_watch_count\t"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}
