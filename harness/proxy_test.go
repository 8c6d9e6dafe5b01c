package harness

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Each fault: a client through the proxy sees it, a client connected to the
// server directly does not, and Restore brings the proxied path back on the
// same address.

// The tests that need a server that answers run a line server of their own
// (pingServer): "PING" answers "PONG", "GET" a 100 kB line.

const bigLine = 100_000

func pingServer(t *testing.T) string {
	return upstream(t, func(c net.Conn, _ <-chan struct{}) {
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			switch strings.TrimSpace(line) {
			case "PING":
				io.WriteString(c, "PONG\n")
			case "GET":
				io.WriteString(c, strings.Repeat("x", bigLine)+"\n")
			}
		}
	})
}

// lineConn is a client of pingServer.
type lineConn struct {
	net.Conn
	r *bufio.Reader
}

func dialLine(addr string, d time.Duration) (*lineConn, error) {
	c, err := net.DialTimeout("tcp", addr, d)
	if err != nil {
		return nil, err
	}
	return &lineConn{Conn: c, r: bufio.NewReader(c)}, nil
}

func lineClient(t *testing.T, addr string) *lineConn {
	t.Helper()
	c, err := dialLine(addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// call sends cmd and returns the answer line, within d.
func (c *lineConn) call(cmd string, d time.Duration) (string, error) {
	c.SetDeadline(time.Now().Add(d))
	if _, err := io.WriteString(c, cmd+"\n"); err != nil {
		return "", err
	}
	line, err := c.r.ReadString('\n')
	return strings.TrimSuffix(line, "\n"), err
}

// pingOn runs PING on c within d.
func pingOn(c *lineConn, d time.Duration) error {
	got, err := c.call("PING", d)
	if err == nil && got != "PONG" {
		err = errors.New("answer " + got)
	}
	return err
}

// pingAddr runs PING on a connection of its own.
func pingAddr(addr string, d time.Duration) error {
	c, err := dialLine(addr, d)
	if err != nil {
		return err
	}
	defer c.Close()
	return pingOn(c, d)
}

func TestProxyCut(t *testing.T) {
	t.Parallel()
	server := pingServer(t)
	p := NewProxy(t, server)
	if p.Addr() == server || p.Upstream() != server {
		t.Fatalf("proxy %s → %s for server %s", p.Addr(), p.Upstream(), server)
	}
	through, direct := lineClient(t, p.Addr()), lineClient(t, server)
	if err := pingOn(through, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	addr := p.Addr()

	if err := p.Cut(); err != nil {
		t.Fatal(err)
	}
	if err := pingOn(through, time.Second); err == nil {
		t.Fatal("PING on a connection through a cut proxy answered")
	}
	if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatal("a cut proxy accepted a connection")
	}
	if err := pingOn(direct, time.Second); err != nil {
		t.Fatalf("direct PING during the cut: %v", err)
	}

	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	if p.Addr() != addr {
		t.Fatalf("proxy moved from %s to %s", addr, p.Addr())
	}
	Eventually(t, 5*time.Second, func() error { return pingAddr(p.Addr(), time.Second) })
}

func TestProxyBlackhole(t *testing.T) {
	t.Parallel()
	server := pingServer(t)
	p := NewProxy(t, server)
	through, direct := lineClient(t, p.Addr()), lineClient(t, server)
	if err := pingOn(through, 2*time.Second); err != nil {
		t.Fatal(err)
	}

	if err := p.Blackhole(); err != nil {
		t.Fatal(err)
	}
	if err := pingOn(through, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("PING through a blackhole: %v, want a timeout", err)
	}
	// New connections are accepted, and answered no more than old ones.
	fresh := lineClient(t, p.Addr())
	if err := pingOn(fresh, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("PING on a new connection into a blackhole: %v, want a timeout", err)
	}
	if err := pingOn(direct, time.Second); err != nil {
		t.Fatalf("direct PING during the blackhole: %v", err)
	}

	// Restore: connections that lived through it are closed (their streams
	// lost data); new ones work.
	raw := dialProxy(t, p)
	io.WriteString(raw, "PING\r\n") // dropped
	Eventually(t, 5*time.Second, func() error {
		if !p.hasClient(raw.LocalAddr().String()) {
			return errors.New("not accepted yet")
		}
		return nil
	})
	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := raw.Read(make([]byte, 16)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection that lived through the blackhole: read %d bytes, %v after Restore; want it closed", n, err)
	}
	if err := pingAddr(p.Addr(), 2*time.Second); err != nil {
		t.Fatalf("PING after Restore: %v", err)
	}
}

func TestProxyDelay(t *testing.T) {
	t.Parallel()
	server := pingServer(t)
	p := NewProxy(t, server)
	through, direct := lineClient(t, p.Addr()), lineClient(t, server)
	if err := pingOn(through, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	timed := func(c *lineConn) time.Duration {
		t.Helper()
		start := time.Now()
		if err := pingOn(c, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}

	if err := p.Delay(300 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if took := timed(through); took < 300*time.Millisecond {
		t.Fatalf("PING through a 300ms delay took %v", took)
	}
	if took := timed(direct); took >= 300*time.Millisecond {
		t.Fatalf("direct PING took %v during the delay", took)
	}
	// A new Delay replaces the old one; it does not add up.
	if err := p.Delay(50 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if took := timed(through); took < 50*time.Millisecond || took >= 300*time.Millisecond {
		t.Fatalf("PING through a 50ms delay (replacing 300ms) took %v", took)
	}
	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	c := lineClient(t, p.Addr())
	if took := timed(c); took >= 300*time.Millisecond {
		t.Fatalf("PING after Restore took %v", took)
	}
}

func TestProxySlow(t *testing.T) {
	t.Parallel()
	server := pingServer(t)
	p := NewProxy(t, server)
	through, direct := lineClient(t, p.Addr()), lineClient(t, server)
	get := func(c *lineConn) time.Duration {
		t.Helper()
		start := time.Now()
		v, err := c.call("GET", 10*time.Second)
		if err != nil || len(v) != bigLine {
			t.Fatalf("GET = %d bytes, %v", len(v), err)
		}
		return time.Since(start)
	}
	if err := p.Slow(200); err != nil { // 100 kB at 200 kB/s: half a second
		t.Fatal(err)
	}
	slow := get(through)
	fast := get(direct)
	t.Logf("100 kB through Slow(200): %v; direct: %v", slow, fast)
	if slow < 400*time.Millisecond {
		t.Fatalf("100 kB through a 200 kB/s proxy took %v", slow)
	}
	if fast >= slow {
		t.Fatalf("direct GET (%v) not faster than through the slowed proxy (%v)", fast, slow)
	}
	if err := p.Slow(0); err != nil { // takes it away
		t.Fatal(err)
	}
	if took := get(through); took >= 400*time.Millisecond {
		t.Fatalf("GET after Slow(0) took %v", took)
	}
}

// upstream is an in-process server for the tests that need a server which
// behaves in a particular way; it stops, with its connections, at the end of
// the test.
func upstream(t *testing.T, handle func(c net.Conn, done <-chan struct{})) string {
	t.Helper()
	done := make(chan struct{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c, done)
			}()
		}
	}()
	t.Cleanup(func() {
		close(done)
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

func dialProxy(t *testing.T, p *Proxy) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// Delay holds each chunk from its arrival: two chunks sent 100 ms apart
// arrive 100 ms apart, not one delay after the other.
func TestProxyDelayDoesNotAddUp(t *testing.T) {
	t.Parallel()
	up := upstream(t, func(c net.Conn, _ <-chan struct{}) {
		io.WriteString(c, "a")
		time.Sleep(100 * time.Millisecond)
		io.WriteString(c, "b")
		io.Copy(io.Discard, c)
	})
	p := NewProxy(t, up)
	if err := p.Delay(300 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c := dialProxy(t, p)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 1)
	var at []time.Duration
	for range 2 {
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
		at = append(at, time.Since(start))
	}
	t.Logf("chunks at %v", at)
	if at[0] < 300*time.Millisecond || at[1] < 400*time.Millisecond {
		t.Fatalf("chunks arrived at %v; want ≥300ms and ≥400ms", at)
	}
	if at[1]-at[0] > 250*time.Millisecond {
		t.Fatalf("second chunk %v after the first: the delays added up", at[1]-at[0])
	}
}

// A client that sends its request and shuts its side (as some four-letter
// word clients do) still gets the answer: the half-close is passed on.
func TestProxyHalfClose(t *testing.T) {
	t.Parallel()
	up := upstream(t, func(c net.Conn, _ <-chan struct{}) {
		req, _ := io.ReadAll(c) // until the client's EOF
		io.WriteString(c, "got "+string(req))
	})
	p := NewProxy(t, up)
	c := dialProxy(t, p)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "srvr")
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "got srvr" {
		t.Fatalf("answer %q, %v; want %q", got, err, "got srvr")
	}
}

// Close ends every connection in every state — blocked writing to a server
// that does not read, to a client that does not read, holding a delayed
// chunk, blackholed, cut — promptly, and leaves no goroutine behind. Not
// parallel: it checks for goroutines against a snapshot.
func TestProxyCloseEndsEverything(t *testing.T) {
	// Registered first, so it runs last: after the cleanups that stop the
	// upstreams and close the clients, nothing of the proxies may run.
	snapshot := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		if err := goleak.Find(snapshot); err != nil {
			t.Error(err)
		}
	})
	func() {
		sink := upstream(t, func(c net.Conn, done <-chan struct{}) { <-done }) // never reads
		flood := upstream(t, func(c net.Conn, _ <-chan struct{}) {             // writes until it cannot
			chunk := bytes.Repeat([]byte("y"), 64<<10)
			for {
				if _, err := c.Write(chunk); err != nil {
					return
				}
			}
		})
		ps := map[string]*Proxy{}
		for _, name := range []string{"sink", "flood", "delayed", "blackholed", "cut"} {
			up := flood
			if name == "sink" {
				up = sink
			}
			p, err := StartProxy(up)
			if err != nil {
				t.Fatal(err)
			}
			ps[name] = p
		}
		// Writes to the sink fill the socket buffers, then block in the proxy.
		sc := dialProxy(t, ps["sink"])
		go func() {
			data := bytes.Repeat([]byte("z"), 1<<20)
			for {
				if _, err := sc.Write(data); err != nil {
					return
				}
			}
		}()
		dialProxy(t, ps["flood"]) // never read: the proxy's writer blocks
		if err := ps["delayed"].Delay(time.Hour); err != nil {
			t.Fatal(err)
		}
		dialProxy(t, ps["delayed"])
		if err := ps["blackholed"].Blackhole(); err != nil {
			t.Fatal(err)
		}
		bc := dialProxy(t, ps["blackholed"])
		bc.Write([]byte("anything"))
		dialProxy(t, ps["cut"])
		if err := ps["cut"].Cut(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // let the buffers fill and the pumps block

		for name, p := range ps {
			done := make(chan struct{})
			go func() { p.Close(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatalf("Close of the %s proxy hangs", name)
			}
			if err := p.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			if err := p.Delay(time.Second); err == nil {
				t.Fatal("Delay after Close succeeded")
			}
			if err := p.Restore(); err == nil {
				t.Fatal("Restore after Close succeeded")
			}
		}
	}()
}

// hasClient reports whether a connection from the client address addr goes
// through p.
func (p *Proxy) hasClient(addr string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.links {
		if k.client.RemoteAddr().String() == addr {
			return true
		}
	}
	return false
}
