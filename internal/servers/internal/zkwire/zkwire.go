package zkwire

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"path"
	"strings"
	"time"
)

// Error is a ZooKeeper error code.
type Error int32

// Codes the harness meets. The full list is in ZooKeeper's KeeperException.
const (
	ErrConnectionLoss   Error = -4
	ErrUnimplemented    Error = -6
	ErrOperationTimeout Error = -7
	ErrBadArguments     Error = -8
	ErrNoNode           Error = -101
	ErrNoAuth           Error = -102
	ErrBadVersion       Error = -103
	ErrNodeExists       Error = -110
	ErrNotEmpty         Error = -111
	ErrSessionExpired   Error = -112
	ErrInvalidACL       Error = -114
)

var errorNames = map[Error]string{
	ErrConnectionLoss: "connection loss", ErrUnimplemented: "unimplemented",
	ErrOperationTimeout: "operation timeout", ErrBadArguments: "bad arguments",
	ErrNoNode: "node does not exist", ErrNoAuth: "not authorized", ErrBadVersion: "bad version",
	ErrNodeExists: "node already exists", ErrNotEmpty: "node has children",
	ErrSessionExpired: "session expired", ErrInvalidACL: "invalid ACL",
}

func (e Error) Error() string {
	if n, ok := errorNames[e]; ok {
		return "zk: " + n
	}
	return fmt.Sprintf("zk: error %d", int32(e))
}

// ErrProtocol is wrapped by errors about replies this package cannot parse.
var ErrProtocol = errors.New("zkwire: protocol error")

// Operation codes (ZooDefs.OpCode).
const (
	opCreate      = 1
	opDelete      = 2
	opExists      = 3
	opGetData     = 4
	opGetChildren = 8
	opPing        = 11
	opClose       = -11
)

const maxFrame = 16 << 20 // jute.maxbuffer's default is 1 MiB (per znode); lists can be longer

// Stat is a znode's metadata.
type Stat struct {
	Czxid, Mzxid, Ctime, Mtime int64
	Version, Cversion          int32
	Aversion                   int32
	EphemeralOwner             int64
	DataLength, NumChildren    int32
	Pzxid                      int64
}

// Conn is one session.
type Conn struct {
	nc        net.Conn
	r         *bufio.Reader
	xid       int32
	sessionID int64
	timeout   time.Duration // negotiated
	closed    bool
}

// Dial opens a session with the first of addrs (host:port) that grants one.
// sessionTimeout is what the client asks for; the server may negotiate it
// into its own bounds.
func Dial(ctx context.Context, addrs []string, sessionTimeout time.Duration) (*Conn, error) {
	var errs []error
	for _, a := range addrs {
		c, err := dialOne(ctx, a, sessionTimeout)
		if err == nil {
			return c, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", a, err))
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) == 0 {
		return nil, errors.New("zkwire: no addresses")
	}
	return nil, errors.Join(errs...)
}

func dialOne(ctx context.Context, addr string, sessionTimeout time.Duration) (*Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &Conn{nc: nc, r: bufio.NewReader(nc)}
	err = c.withContext(ctx, func() error {
		var b []byte
		b = binary.BigEndian.AppendUint32(b, 0) // protocol version
		b = binary.BigEndian.AppendUint64(b, 0) // last zxid seen
		b = binary.BigEndian.AppendUint32(b, uint32(sessionTimeout.Milliseconds()))
		b = binary.BigEndian.AppendUint64(b, 0) // session id: a new session
		b = appendBuffer(b, make([]byte, 16))   // password
		b = append(b, 0)                        // not read-only
		if err := c.writeFrame(b); err != nil {
			return err
		}
		f, err := c.readFrame()
		if err != nil {
			return err
		}
		d := decoder{b: f}
		d.int32() // protocol version
		to := d.int32()
		c.sessionID = d.int64()
		d.buffer() // password
		if d.err != nil {
			return d.err
		}
		if to <= 0 {
			return ErrSessionExpired
		}
		c.timeout = time.Duration(to) * time.Millisecond
		return nil
	})
	if err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

// SessionID returns the session's id.
func (c *Conn) SessionID() int64 { return c.sessionID }

// SessionTimeout returns the session timeout the server granted.
func (c *Conn) SessionTimeout() time.Duration { return c.timeout }

func (c *Conn) withContext(ctx context.Context, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	nc := c.nc
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	} else {
		nc.SetDeadline(time.Time{})
	}
	err := fn()
	if err != nil {
		var ze Error
		if !errors.As(err, &ze) {
			if cerr := ctxErr(ctx); cerr != nil {
				err = fmt.Errorf("%w (%v)", cerr, err)
			}
		}
	}
	return err
}

// ctxErr is ctx.Err(), or DeadlineExceeded once the deadline has passed: the
// socket's deadline (the same instant) may fire before ctx's own timer.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *Conn) writeFrame(b []byte) error {
	f := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(b)), uint32(len(b)))
	_, err := c.nc.Write(append(f, b...))
	return err
}

func (c *Conn) readFrame() ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(c.r, n[:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	l := binary.BigEndian.Uint32(n[:])
	if l > maxFrame {
		return nil, fmt.Errorf("%w: frame of %d bytes", ErrProtocol, l)
	}
	b := make([]byte, l)
	if _, err := io.ReadFull(c.r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b, nil
}

// do sends one request and returns its reply body. Replies to other xids
// (a watch event, xid -1, which this client never asks for) are skipped.
func (c *Conn) do(ctx context.Context, op int32, body []byte) ([]byte, error) {
	if c.closed {
		return nil, net.ErrClosed
	}
	xid := int32(-2) // pings use xid -2
	if op != opPing {
		c.xid++
		xid = c.xid
	}
	var reply []byte
	err := c.withContext(ctx, func() error {
		req := binary.BigEndian.AppendUint32(nil, uint32(xid))
		req = binary.BigEndian.AppendUint32(req, uint32(op))
		if err := c.writeFrame(append(req, body...)); err != nil {
			return err
		}
		for {
			f, err := c.readFrame()
			if err != nil {
				return err
			}
			d := decoder{b: f}
			rx := d.int32()
			d.int64() // zxid
			code := d.int32()
			if d.err != nil {
				return d.err
			}
			if rx != xid {
				continue
			}
			if code != 0 {
				return Error(code)
			}
			reply = d.b
			return nil
		}
	})
	if err != nil {
		var ze Error
		if !errors.As(err, &ze) { // the stream is in an unknown state
			c.nc.Close()
			c.closed = true
		}
		return nil, err
	}
	return reply, nil
}

// Create makes a persistent znode with data, open to everyone
// (world:anyone, all permissions), and returns its path.
func (c *Conn) Create(ctx context.Context, p string, data []byte) (string, error) {
	b := appendString(nil, p)
	b = appendBuffer(b, data)
	b = binary.BigEndian.AppendUint32(b, 1)    // one ACL
	b = binary.BigEndian.AppendUint32(b, 0x1f) // Perms.ALL
	b = appendString(b, "world")
	b = appendString(b, "anyone")
	b = binary.BigEndian.AppendUint32(b, 0) // persistent
	r, err := c.do(ctx, opCreate, b)
	if err != nil {
		return "", err
	}
	d := decoder{b: r}
	s := d.string()
	return s, d.err
}

// Delete removes a znode without children; version -1 matches any version.
func (c *Conn) Delete(ctx context.Context, p string, version int32) error {
	b := appendString(nil, p)
	b = binary.BigEndian.AppendUint32(b, uint32(version))
	_, err := c.do(ctx, opDelete, b)
	return err
}

// Exists reports whether p exists, with its Stat when it does.
func (c *Conn) Exists(ctx context.Context, p string) (bool, *Stat, error) {
	r, err := c.do(ctx, opExists, append(appendString(nil, p), 0))
	if errors.Is(err, ErrNoNode) {
		return false, nil, nil
	}
	if err != nil {
		return false, nil, err
	}
	d := decoder{b: r}
	st := d.stat()
	return true, &st, d.err
}

// Get returns a znode's data and Stat.
func (c *Conn) Get(ctx context.Context, p string) ([]byte, *Stat, error) {
	r, err := c.do(ctx, opGetData, append(appendString(nil, p), 0))
	if err != nil {
		return nil, nil, err
	}
	d := decoder{b: r}
	data := d.buffer()
	st := d.stat()
	return data, &st, d.err
}

// Children returns the names of p's children.
func (c *Conn) Children(ctx context.Context, p string) ([]string, error) {
	r, err := c.do(ctx, opGetChildren, append(appendString(nil, p), 0))
	if err != nil {
		return nil, err
	}
	d := decoder{b: r}
	n := d.int32()
	if n < 0 || int(n) > len(d.b)/4 {
		return nil, fmt.Errorf("%w: %d children", ErrProtocol, n)
	}
	out := make([]string, 0, n)
	for range n {
		out = append(out, d.string())
	}
	return out, d.err
}

// Ping keeps the session alive and checks that the server answers.
func (c *Conn) Ping(ctx context.Context) error {
	_, err := c.do(ctx, opPing, nil)
	return err
}

// Close ends the session (the server drops its ephemeral nodes) and closes
// the connection. It is idempotent.
func (c *Conn) Close() error {
	if c.closed {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c.do(ctx, opClose, nil) // best effort: the session expires anyway
	c.closed = true
	return c.nc.Close()
}

// CreateAll creates p and its missing parents, each empty; existing ones are
// fine.
func (c *Conn) CreateAll(ctx context.Context, p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("zkwire: %q is not an absolute path", p)
	}
	cur := ""
	for _, part := range strings.Split(strings.Trim(p, "/"), "/") {
		cur += "/" + part
		if _, err := c.Create(ctx, cur, nil); err != nil && !errors.Is(err, ErrNodeExists) {
			return fmt.Errorf("create %s: %w", cur, err)
		}
	}
	return nil
}

// DeleteAll deletes p and everything below it; a missing p is fine. A
// child that appears meanwhile (ErrNotEmpty) is deleted on a second pass.
func (c *Conn) DeleteAll(ctx context.Context, p string) error {
	if p == "/" || p == "" || !strings.HasPrefix(p, "/") {
		return fmt.Errorf("zkwire: refusing to delete %q", p)
	}
	return c.deleteAll(ctx, p, 0)
}

func (c *Conn) deleteAll(ctx context.Context, p string, depth int) error {
	if depth > 64 {
		return fmt.Errorf("zkwire: %s is nested deeper than 64 levels", p)
	}
	for attempt := 0; ; attempt++ {
		children, err := c.Children(ctx, p)
		if errors.Is(err, ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, ch := range children {
			if err := c.deleteAll(ctx, path.Join(p, ch), depth+1); err != nil {
				return err
			}
		}
		err = c.Delete(ctx, p, -1)
		if err == nil || errors.Is(err, ErrNoNode) {
			return nil
		}
		if !errors.Is(err, ErrNotEmpty) || attempt >= 3 {
			return fmt.Errorf("delete %s: %w", p, err)
		}
	}
}

// jute encoding: big-endian integers; strings and buffers are an int32
// length (-1 for null) and the bytes.

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func appendBuffer(b, data []byte) []byte {
	if data == nil {
		return binary.BigEndian.AppendUint32(b, 0xffffffff)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	return append(b, data...)
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.err = fmt.Errorf("%w: short reply", ErrProtocol)
		return nil
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out
}

func (d *decoder) int32() int32 {
	b := d.take(4)
	if b == nil {
		return 0
	}
	return int32(binary.BigEndian.Uint32(b))
}

func (d *decoder) int64() int64 {
	b := d.take(8)
	if b == nil {
		return 0
	}
	return int64(binary.BigEndian.Uint64(b))
}

func (d *decoder) buffer() []byte {
	n := d.int32()
	if n == -1 || d.err != nil {
		return nil
	}
	return append([]byte(nil), d.take(int(n))...)
}

func (d *decoder) string() string { return string(d.buffer()) }

func (d *decoder) stat() Stat {
	return Stat{
		Czxid: d.int64(), Mzxid: d.int64(), Ctime: d.int64(), Mtime: d.int64(),
		Version: d.int32(), Cversion: d.int32(), Aversion: d.int32(),
		EphemeralOwner: d.int64(), DataLength: d.int32(), NumChildren: d.int32(),
		Pzxid: d.int64(),
	}
}
