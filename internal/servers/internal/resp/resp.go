package resp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// Limits on what a reply may claim, so a confused or hostile peer cannot make
// the harness allocate without bound.
const (
	maxBulk  = 64 << 20
	maxArray = 1 << 20
	maxDepth = 16
	maxLine  = 64 << 10
)

// Error is an error reply of the server, e.g. "LOADING Redis is loading the
// dataset in memory" or "ERR unknown command".
type Error struct {
	Msg string // the whole line after '-'
}

func (e *Error) Error() string { return "redis: " + e.Msg }

// Prefix returns the error's first word ("ERR", "LOADING", "WRONGTYPE", …).
func (e *Error) Prefix() string {
	p, _, _ := strings.Cut(e.Msg, " ")
	return p
}

// ErrProtocol is wrapped by errors about replies this package cannot parse.
var ErrProtocol = errors.New("resp: protocol error")

// Conn is one connection to a Redis server.
type Conn struct {
	nc     net.Conn
	r      *bufio.Reader
	w      *bufio.Writer
	closed bool
}

// Dial connects to addr (host:port). ctx bounds the dial only.
func Dial(ctx context.Context, addr string) (*Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &Conn{nc: nc, r: bufio.NewReader(nc), w: bufio.NewWriter(nc)}, nil
}

// Close closes the connection. It is idempotent.
func (c *Conn) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	return c.nc.Close()
}

// Do sends one command and reads its reply. ctx bounds the whole exchange.
func (c *Conn) Do(ctx context.Context, args ...string) (any, error) {
	if c.closed {
		return nil, net.ErrClosed
	}
	if len(args) == 0 {
		return nil, errors.New("resp: empty command")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(time.Unix(1, 0)) }) // unblock I/O
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		c.nc.SetDeadline(dl)
	} else {
		c.nc.SetDeadline(time.Time{})
	}
	v, err := c.exchange(args)
	if err != nil {
		var re *Error
		if !errors.As(err, &re) { // the stream is in an unknown state
			c.Close()
			if cerr := ctxErr(ctx); cerr != nil {
				err = fmt.Errorf("%w (%v)", cerr, err)
			}
		}
		return nil, err
	}
	return v, nil
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

func (c *Conn) exchange(args []string) (any, error) {
	fmt.Fprintf(c.w, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(c.w, "$%d\r\n%s\r\n", len(a), a)
	}
	if err := c.w.Flush(); err != nil {
		return nil, err
	}
	return readValue(c.r, 0)
}

func readLine(r *bufio.Reader) (string, error) {
	var b []byte
	for {
		chunk, isPrefix, err := r.ReadLine()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
		b = append(b, chunk...)
		if len(b) > maxLine {
			return "", fmt.Errorf("%w: line longer than %d bytes", ErrProtocol, maxLine)
		}
		if !isPrefix {
			return string(b), nil
		}
	}
}

// readValue reads one RESP2 value. An error reply is returned as *Error only
// at the top level; nested in an array (EXEC) it is kept as a value.
func readValue(r *bufio.Reader, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("%w: arrays nested deeper than %d", ErrProtocol, maxDepth)
	}
	line, err := readLine(r)
	if err != nil {
		return nil, err
	}
	if line == "" {
		return nil, fmt.Errorf("%w: empty line", ErrProtocol)
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		if depth > 0 {
			return &Error{Msg: body}, nil
		}
		return nil, &Error{Msg: body}
	case ':':
		n, err := strconv.ParseInt(body, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: integer %q", ErrProtocol, body)
		}
		return n, nil
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 || n > maxBulk {
			return nil, fmt.Errorf("%w: bulk length %q", ErrProtocol, body)
		}
		if n == -1 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return nil, fmt.Errorf("%w: bulk string not terminated by CRLF", ErrProtocol)
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 || n > maxArray {
			return nil, fmt.Errorf("%w: array length %q", ErrProtocol, body)
		}
		if n == -1 {
			return nil, nil
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = readValue(r, depth+1); err != nil {
				return nil, err
			}
		}
		return out, nil
	default:
		return nil, fmt.Errorf("%w: reply type %q (RESP3 is not supported)", ErrProtocol, line[0])
	}
}

// String runs a command whose reply is a string (simple or bulk). A null
// reply is ("", false, nil).
func (c *Conn) String(ctx context.Context, args ...string) (s string, ok bool, err error) {
	v, err := c.Do(ctx, args...)
	if err != nil || v == nil {
		return "", false, err
	}
	s, ok = v.(string)
	if !ok {
		return "", false, fmt.Errorf("%w: %s replied %T, want a string", ErrProtocol, args[0], v)
	}
	return s, true, nil
}

// Int runs a command whose reply is an integer.
func (c *Conn) Int(ctx context.Context, args ...string) (int64, error) {
	v, err := c.Do(ctx, args...)
	if err != nil {
		return 0, err
	}
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("%w: %s replied %T, want an integer", ErrProtocol, args[0], v)
	}
	return n, nil
}

// Info runs INFO section and returns its fields (e.g. "process_id",
// "role", "master_link_status").
func (c *Conn) Info(ctx context.Context, section string) (map[string]string, error) {
	s, _, err := c.String(ctx, "INFO", section)
	if err != nil {
		return nil, err
	}
	return ParseInfo(s), nil
}

// ParseInfo splits INFO's "key:value" lines; comments and blank lines are
// skipped.
func ParseInfo(info string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = v
		}
	}
	return out
}

// Scan runs one SCAN step: keys matching pattern from cursor on, and the
// cursor to continue with ("0" when the iteration is complete).
func (c *Conn) Scan(ctx context.Context, cursor, pattern string, count int) (keys []string, next string, err error) {
	v, err := c.Do(ctx, "SCAN", cursor, "MATCH", pattern, "COUNT", strconv.Itoa(count))
	if err != nil {
		return nil, "", err
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != 2 {
		return nil, "", fmt.Errorf("%w: SCAN replied %v", ErrProtocol, v)
	}
	next, ok1 := arr[0].(string)
	list, ok2 := arr[1].([]any)
	if !ok1 || !ok2 {
		return nil, "", fmt.Errorf("%w: SCAN replied %v", ErrProtocol, v)
	}
	for _, k := range list {
		s, ok := k.(string)
		if !ok {
			return nil, "", fmt.Errorf("%w: SCAN key %v", ErrProtocol, k)
		}
		keys = append(keys, s)
	}
	return keys, next, nil
}

// EscapeGlob escapes s for a MATCH pattern, so it matches only itself.
func EscapeGlob(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)
	return r.Replace(s)
}
