package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Proxy is an in-process TCP proxy in front of one server, so a test can
// cut, delay, slow or blackhole the connections of the clients it points at
// [Proxy.Addr] without touching the server or other clients. It works in
// front of any address, servers from the environment included.
//
// Faults apply to open connections and new ones alike, and stay until
// [Proxy.Restore]. Delay and Slow act on what the server sends (the
// replies); Blackhole and Cut act both ways. Methods are safe for concurrent
// use.
//
// Restore ends the connections that lived through a fault, and clients
// reconnect to a clean path: a blackhole has thrown data away, so their byte
// streams cannot be trusted any more, and a test reads more simply when
// "restored" means "fresh connections".
//
// Every goroutine of a Proxy ends when its connections or listener are
// closed, and Close (which NewProxy's cleanup calls) closes them all and
// waits for those goroutines: a proxy never hangs a test's teardown, and
// leaves nothing for goleak to find.
type Proxy struct {
	addr     string // where clients connect; stays across Cut and Restore
	upstream string

	mu      sync.Mutex // guards the fields below
	l       net.Listener
	links   map[*link]struct{}
	f       faults
	dirty   bool          // a fault was set since the last clean state
	closed  bool          //
	changed chan struct{} // closed (and replaced) when f changes: wakes waiting writers

	wg sync.WaitGroup // every goroutine of the proxy
}

// faults is the proxy's state of breakage; the zero value passes everything.
type faults struct {
	delay     time.Duration // added to each chunk the server sends
	rate      int64         // bytes per second the server may send; 0: unlimited
	blackhole bool          // read and drop everything, both ways
}

// errProxyClosed is returned by the fault methods after Close.
var errProxyClosed = fmt.Errorf("harness: proxy closed: %w", net.ErrClosed)

// NewProxy starts a proxy to upstream (host:port) for the calling test; it is
// closed when the test ends.
func NewProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	p, err := StartProxy(upstream)
	if err != nil {
		t.Fatalf("harness: proxy to %s: %v", upstream, err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// StartProxy is NewProxy without a test: the caller closes the proxy.
func StartProxy(upstream string) (*Proxy, error) {
	var err error
	for range 3 {
		var pt []int
		if pt, err = FreePorts(1); err != nil {
			return nil, err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(pt[0]))
		var l net.Listener
		if l, err = net.Listen("tcp", addr); err == nil {
			p := &Proxy{addr: addr, upstream: upstream, links: map[*link]struct{}{}, changed: make(chan struct{})}
			p.serveLocked(l)
			return p, nil
		}
		if !portInUse(err.Error()) {
			break
		}
	}
	return nil, err
}

// Addr returns the host:port clients connect to instead of the server's.
func (p *Proxy) Addr() string { return p.addr }

// Upstream returns the address the proxy forwards to.
func (p *Proxy) Upstream() string { return p.upstream }

// Cut closes every connection through the proxy and refuses new ones (the
// port is closed): clients' calls fail at once, with a connection reset or
// refused, until Restore.
func (p *Proxy) Cut() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errProxyClosed
	}
	if p.l != nil {
		p.l.Close()
		p.l = nil
	}
	p.closeLinksLocked()
	p.dirty = true
	return nil
}

// Restore removes every fault and accepts connections again, on the same
// address. Connections that lived through a fault are closed (see [Proxy]);
// with no fault since the last Restore it changes nothing.
func (p *Proxy) Restore() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errProxyClosed
	}
	if !p.dirty {
		return nil
	}
	p.closeLinksLocked()
	p.setLocked(faults{})
	p.dirty = false
	if p.l == nil {
		// The port is ours alone in this process (ports never hands it out
		// twice) and below the ephemeral range; Go listeners set
		// SO_REUSEADDR, so connections in TIME_WAIT do not block it.
		l, err := net.Listen("tcp", p.addr)
		if err != nil {
			p.dirty = true
			return fmt.Errorf("harness: restoring proxy on %s: %w", p.addr, err)
		}
		p.serveLocked(l)
	}
	return nil
}

// Delay holds back everything the server sends by d (a round trip takes d
// longer; chunks keep their order and do not add up). It replaces an earlier
// Delay; Delay(0) takes it away.
func (p *Proxy) Delay(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("harness: proxy: negative delay %v", d)
	}
	return p.update(func(f *faults) { f.delay = d })
}

// Slow limits what the server sends to about kbPerSec kilobytes (1000
// bytes) per second. It replaces an earlier Slow; Slow(0) takes it away.
func (p *Proxy) Slow(kbPerSec int64) error {
	if kbPerSec < 0 {
		return fmt.Errorf("harness: proxy: negative rate %d", kbPerSec)
	}
	return p.update(func(f *faults) { f.rate = kbPerSec * 1000 })
}

// Blackhole keeps connections open, and accepts new ones, but passes no data
// either way: what clients send is read and dropped, and nothing comes back,
// so their calls hang until their own timeouts.
func (p *Proxy) Blackhole() error {
	return p.update(func(f *faults) { f.blackhole = true })
}

func (p *Proxy) update(change func(*faults)) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errProxyClosed
	}
	f := p.f
	change(&f)
	p.setLocked(f)
	p.dirty = true
	return nil
}

func (p *Proxy) setLocked(f faults) {
	p.f = f
	close(p.changed)
	p.changed = make(chan struct{})
}

// current returns the faults now and a channel closed when they change.
func (p *Proxy) current() (faults, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.f, p.changed
}

// Close closes all connections and stops listening, and returns once every
// goroutine of the proxy has ended. NewProxy's cleanup calls it; calling it
// again is harmless.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		if p.l != nil {
			p.l.Close()
			p.l = nil
		}
		p.closeLinksLocked()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}

func (p *Proxy) closeLinksLocked() {
	for k := range p.links {
		k.close()
		delete(p.links, k)
	}
}

// serveLocked starts the accept loop of l.
func (p *Proxy) serveLocked(l net.Listener) {
	p.l = l
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return // closed by Cut or Close; a real accept error ends the listener too
			}
			p.mu.Lock()
			if p.l != l { // cut or closed meanwhile
				p.mu.Unlock()
				c.Close()
				continue
			}
			k := newLink(c)
			p.links[k] = struct{}{}
			p.wg.Add(1) // while this goroutine counts, so Close's Wait cannot have returned
			p.mu.Unlock()
			go func() {
				defer p.wg.Done()
				p.relay(k)
				p.mu.Lock()
				delete(p.links, k)
				p.mu.Unlock()
				k.close()
			}()
		}
	}()
}

// link is one client connection and its connection to the server.
type link struct {
	ctx    context.Context // ended by close
	cancel context.CancelFunc
	client net.Conn

	mu     sync.Mutex
	server net.Conn // nil until dialled
	closed bool
}

func newLink(client net.Conn) *link {
	ctx, cancel := context.WithCancel(context.Background())
	return &link{ctx: ctx, cancel: cancel, client: client}
}

// close ends both connections, which unblocks every read and write on them.
// Idempotent.
func (k *link) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return
	}
	k.closed = true
	k.cancel()
	k.client.Close()
	if k.server != nil {
		k.server.Close()
	}
}

// chunk is data the server sent, with the time it arrived.
type chunk struct {
	data []byte
	at   time.Time
}

// relay connects k to the server and runs its three pumps: client to server,
// server to a queue (stamped with arrival times), and queue to client with
// the faults applied. It returns when all three have ended.
func (p *Proxy) relay(k *link) {
	dctx, cancel := context.WithTimeout(k.ctx, 10*time.Second)
	var d net.Dialer
	server, err := d.DialContext(dctx, "tcp", p.upstream)
	cancel()
	if err != nil {
		return // the client sees its connection closed, as from a dead server
	}
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		server.Close()
		return
	}
	k.server = server
	k.mu.Unlock()

	queue := make(chan chunk, 16)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { // client → server
		defer wg.Done()
		p.upstreamPump(k, server)
	}()
	go func() { // server → queue
		defer wg.Done()
		defer close(queue)
		buf := make([]byte, 32<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 {
				c := chunk{data: append([]byte(nil), buf[:n]...), at: time.Now()}
				select {
				case queue <- c:
				case <-k.ctx.Done():
					return
				}
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					k.close()
				}
				return
			}
		}
	}()
	go func() { // queue → client
		defer wg.Done()
		p.downstreamPump(k, queue)
	}()
	wg.Wait()
}

// upstreamPump forwards what the client sends, or drops it in a blackhole.
// The client's EOF is passed on as a half-close, so a client that sends a
// request and shuts its side still gets the answer.
func (p *Proxy) upstreamPump(k *link, server net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := k.client.Read(buf)
		if n > 0 {
			if f, _ := p.current(); !f.blackhole {
				if _, werr := server.Write(buf[:n]); werr != nil {
					k.close()
					return
				}
			}
		}
		if err != nil {
			if f, _ := p.current(); errors.Is(err, io.EOF) && !f.blackhole {
				if tc, ok := server.(*net.TCPConn); ok {
					tc.CloseWrite()
					return
				}
			}
			k.close()
			return
		}
	}
}

// downstreamPump writes the server's chunks to the client, each no earlier
// than its arrival plus the delay, at most at the rate, or not at all in a
// blackhole. A fault change wakes it up to decide again.
func (p *Proxy) downstreamPump(k *link, queue <-chan chunk) {
	for c := range queue {
		data := c.data
		for len(data) > 0 {
			f, changed := p.current()
			if f.blackhole {
				data = nil
				break
			}
			if wait := time.Until(c.at.Add(f.delay)); f.delay > 0 && wait > 0 {
				if !sleep(k.ctx, changed, wait) {
					return
				}
				continue // the faults may have changed meanwhile
			}
			n := len(data)
			var pause time.Duration
			if f.rate > 0 {
				// Pieces of 10 ms worth of bytes, each followed by its share
				// of time.
				if piece := int(max(f.rate/100, 1)); n > piece {
					n = piece
				}
				pause = time.Duration(int64(n) * int64(time.Second) / f.rate)
			}
			if _, err := k.client.Write(data[:n]); err != nil {
				k.close()
				return
			}
			data = data[n:]
			if pause > 0 && !sleep(k.ctx, changed, pause) {
				return
			}
		}
	}
	// The server closed its side: pass the EOF on, unless we are blackholed.
	if f, _ := p.current(); !f.blackhole {
		if tc, ok := k.client.(*net.TCPConn); ok {
			tc.CloseWrite()
			return
		}
	}
	<-k.ctx.Done() // a blackhole answers nothing, EOF included
}

// sleep waits d, or until the faults change (true), or until ctx ends
// (false).
func sleep(ctx context.Context, changed <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-changed:
		return true
	case <-ctx.Done():
		return false
	}
}
