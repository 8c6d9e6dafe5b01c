package zkwire

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"path"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ctx5s(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fakeZK is an in-memory ZooKeeper server for the operations Conn speaks.
// The real-server tests are in package servers; this one checks encoding,
// error mapping and the cases a real server is hard to make produce.
type fakeZK struct {
	mu       sync.Mutex
	nodes    map[string][]byte
	watchEvt bool // send a watch event before every reply
	expire   bool // refuse sessions (timeout 0)
	closes   int  // close requests seen
}

func newFakeZK(t *testing.T, f *fakeZK) string {
	t.Helper()
	f.nodes = map[string][]byte{"/": nil}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var conns sync.Map
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Store(c, true)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				f.serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		conns.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		wg.Wait()
	})
	return l.Addr().String()
}

func (f *fakeZK) serve(c net.Conn) {
	r := bufio.NewReader(c)
	frame := func() []byte {
		var n uint32
		if binary.Read(r, binary.BigEndian, &n) != nil || n > 1<<20 {
			return nil
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil
		}
		return b
	}
	write := func(b []byte) { c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)) }
	if frame() == nil {
		return
	}
	to := uint32(4000)
	if f.expire {
		to = 0
	}
	resp := binary.BigEndian.AppendUint32(nil, 0)
	resp = binary.BigEndian.AppendUint32(resp, to)
	resp = binary.BigEndian.AppendUint64(resp, 42)
	resp = appendBuffer(resp, make([]byte, 16))
	write(resp)
	for {
		req := frame()
		if req == nil {
			return
		}
		d := decoder{b: req}
		xid, op := d.int32(), d.int32()
		body, code := f.op(op, &d)
		if f.watchEvt {
			ev := binary.BigEndian.AppendUint32(nil, 0xffffffff) // xid -1
			ev = binary.BigEndian.AppendUint64(ev, 0)
			ev = binary.BigEndian.AppendUint32(ev, 0)
			write(append(ev, make([]byte, 12)...))
		}
		h := binary.BigEndian.AppendUint32(nil, uint32(xid))
		h = binary.BigEndian.AppendUint64(h, 7)
		h = binary.BigEndian.AppendUint32(h, uint32(code))
		write(append(h, body...))
		if op == opClose {
			return
		}
	}
}

func (f *fakeZK) op(op int32, d *decoder) ([]byte, Error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	stat := func(p string) []byte {
		var b []byte
		for range 4 {
			b = binary.BigEndian.AppendUint64(b, 5)
		}
		b = append(b, make([]byte, 12)...)
		b = binary.BigEndian.AppendUint64(b, 0)
		b = binary.BigEndian.AppendUint32(b, uint32(len(f.nodes[p])))
		b = binary.BigEndian.AppendUint32(b, uint32(len(f.children(p))))
		return binary.BigEndian.AppendUint64(b, 5)
	}
	switch op {
	case opPing:
		return nil, 0
	case opClose:
		f.closes++
		return nil, 0
	case opCreate:
		p, data := d.string(), d.buffer()
		if d.int32() != 1 || d.int32() != 0x1f || d.string() != "world" || d.string() != "anyone" || d.int32() != 0 {
			return nil, ErrInvalidACL
		}
		if _, ok := f.nodes[p]; ok {
			return nil, ErrNodeExists
		}
		if _, ok := f.nodes[path.Dir(p)]; !ok {
			return nil, ErrNoNode
		}
		f.nodes[p] = data
		return appendString(nil, p), 0
	case opDelete:
		p := d.string()
		if _, ok := f.nodes[p]; !ok {
			return nil, ErrNoNode
		}
		if len(f.children(p)) > 0 {
			return nil, ErrNotEmpty
		}
		delete(f.nodes, p)
		return nil, 0
	case opExists, opGetData, opGetChildren:
		p := d.string()
		if _, ok := f.nodes[p]; !ok {
			return nil, ErrNoNode
		}
		switch op {
		case opExists:
			return stat(p), 0
		case opGetData:
			return append(appendBuffer(nil, f.nodes[p]), stat(p)...), 0
		default:
			ch := f.children(p)
			b := binary.BigEndian.AppendUint32(nil, uint32(len(ch)))
			for _, c := range ch {
				b = appendString(b, c)
			}
			return b, 0
		}
	}
	return nil, ErrUnimplemented
}

func (f *fakeZK) children(p string) []string {
	var out []string
	for n := range f.nodes {
		if n != "/" && path.Dir(n) == p {
			out = append(out, path.Base(n))
		}
	}
	sort.Strings(out)
	return out
}

func dial(t *testing.T, addr string) *Conn {
	t.Helper()
	c, err := Dial(ctx5s(t), []string{addr}, 4*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestOperations(t *testing.T) {
	f := &fakeZK{}
	c := dial(t, newFakeZK(t, f))
	ctx := ctx5s(t)
	if c.SessionID() != 42 || c.SessionTimeout() != 4*time.Second {
		t.Fatalf("session %d, timeout %v", c.SessionID(), c.SessionTimeout())
	}
	if err := c.CreateAll(ctx, "/fg/run-1/TestX"); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateAll(ctx, "/fg/run-1/TestX"); err != nil {
		t.Fatalf("CreateAll of an existing path: %v", err)
	}
	if p, err := c.Create(ctx, "/fg/run-1/TestX/k", []byte("v")); err != nil || p != "/fg/run-1/TestX/k" {
		t.Fatalf("Create = %q, %v", p, err)
	}
	if _, err := c.Create(ctx, "/fg/run-1/TestX/k", nil); !errors.Is(err, ErrNodeExists) {
		t.Fatalf("second Create: %v, want ErrNodeExists", err)
	}
	if _, err := c.Create(ctx, "/nope/k", nil); !errors.Is(err, ErrNoNode) {
		t.Fatalf("Create without parent: %v, want ErrNoNode", err)
	}
	data, st, err := c.Get(ctx, "/fg/run-1/TestX/k")
	if err != nil || string(data) != "v" || st.DataLength != 1 || st.Czxid != 5 {
		t.Fatalf("Get = %q, %+v, %v", data, st, err)
	}
	if ch, err := c.Children(ctx, "/fg/run-1"); err != nil || !reflect.DeepEqual(ch, []string{"TestX"}) {
		t.Fatalf("Children = %v, %v", ch, err)
	}
	if err := c.Delete(ctx, "/fg", -1); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("Delete of a parent: %v, want ErrNotEmpty", err)
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteAll(ctx, "/fg/run-1"); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := c.Exists(ctx, "/fg/run-1"); err != nil || ok {
		t.Fatalf("Exists after DeleteAll = %v, %v", ok, err)
	}
	if ok, st, err := c.Exists(ctx, "/fg"); err != nil || !ok || st.NumChildren != 0 {
		t.Fatalf("Exists(/fg) = %v, %+v, %v", ok, st, err)
	}
	if err := c.DeleteAll(ctx, "/fg/missing"); err != nil {
		t.Fatalf("DeleteAll of a missing path: %v", err)
	}
	for _, p := range []string{"/", "", "fg"} {
		if err := c.DeleteAll(ctx, p); err == nil {
			t.Errorf("DeleteAll(%q) accepted", p)
		}
	}
	c.Close()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closes != 1 {
		t.Fatalf("%d close requests, want 1", f.closes)
	}
}

// Frames for other xids (watch events) are skipped, not taken as replies.
func TestSkipsOtherXids(t *testing.T) {
	c := dial(t, newFakeZK(t, &fakeZK{watchEvt: true}))
	if _, err := c.Create(ctx5s(t), "/a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if d, _, err := c.Get(ctx5s(t), "/a"); err != nil || string(d) != "x" {
		t.Fatalf("Get = %q, %v", d, err)
	}
}

func TestSessionRefused(t *testing.T) {
	_, err := Dial(ctx5s(t), []string{newFakeZK(t, &fakeZK{expire: true})}, time.Second)
	if !errors.Is(err, ErrSessionExpired) {
		t.Fatalf("err = %v, want ErrSessionExpired", err)
	}
}

// A server that accepts and never answers: the context ends the handshake.
func TestContextBoundsDial(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if c, err := l.Accept(); err == nil {
			io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := Dial(ctx, []string{l.Addr().String()}, time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	l.Close()
	<-done
}

func TestBadReplies(t *testing.T) {
	// A frame length beyond any reply's.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if c, err := l.Accept(); err == nil {
			c.Write([]byte{0x7f, 0xff, 0xff, 0xff})
			io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	if _, err := Dial(ctx5s(t), []string{l.Addr().String()}, time.Second); !errors.Is(err, ErrProtocol) {
		t.Fatalf("err = %v, want ErrProtocol", err)
	}
	l.Close()
	<-done

	d := decoder{b: []byte{0, 0, 0, 9, 'a'}} // a string longer than the reply
	if d.string(); !errors.Is(d.err, ErrProtocol) {
		t.Fatalf("short string: %v", d.err)
	}
}

func TestErrorText(t *testing.T) {
	if ErrNoNode.Error() != "zk: node does not exist" || Error(-999).Error() != "zk: error -999" {
		t.Fatal(ErrNoNode.Error(), Error(-999).Error())
	}
}

func fakeFourLetter(t *testing.T, answer string) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			b := make([]byte, 4)
			io.ReadFull(c, b)
			io.WriteString(c, strings.ReplaceAll(answer, "CMD", string(b)))
			c.Close()
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return l.Addr().String()
}

func TestFourLetter(t *testing.T) {
	addr := fakeFourLetter(t, "Zookeeper version: 3.8.0\nLatency min/avg/max: 0/0.0/0\nMode: follower\nNode count: 5\n")
	if m, err := Mode(ctx5s(t), addr); err != nil || m != "follower" {
		t.Fatalf("Mode = %q, %v", m, err)
	}
	// Before it serves, srvr has no Mode line.
	starting := fakeFourLetter(t, "This ZooKeeper instance is not currently serving requests\n")
	if _, err := Mode(ctx5s(t), starting); err == nil {
		t.Fatal("Mode of a server that does not serve")
	}
	denied := fakeFourLetter(t, "CMD is not executed because it is not in the whitelist.\n")
	if _, err := FourLetter(ctx5s(t), denied, "envi"); err == nil || !strings.Contains(err.Error(), "whitelist") {
		t.Fatalf("err = %v, want the whitelist refusal", err)
	}
}
