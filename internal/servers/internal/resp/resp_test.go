package resp

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeServer accepts one connection, reads one command (in RESP array form)
// and answers reply; got receives the command's raw bytes.
func fakeServer(t *testing.T, reply string) (addr string, got <-chan string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := l.Accept()
		if err != nil {
			ch <- "accept: " + err.Error()
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		raw, err := readRawCommand(r)
		ch <- raw
		if err != nil {
			return
		}
		io.WriteString(c, reply)
		io.Copy(io.Discard, r) // until the client closes
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return l.Addr().String(), ch
}

// readRawCommand reads "*N" and N bulk strings, returning them verbatim.
func readRawCommand(r *bufio.Reader) (string, error) {
	var b strings.Builder
	line, err := r.ReadString('\n')
	b.WriteString(line)
	if err != nil {
		return b.String(), err
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil {
		return b.String(), err
	}
	for range n {
		hdr, err := r.ReadString('\n')
		b.WriteString(hdr)
		if err != nil {
			return b.String(), err
		}
		l, err := strconv.Atoi(strings.TrimSpace(hdr[1:]))
		if err != nil {
			return b.String(), err
		}
		buf := make([]byte, l+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return b.String(), err
		}
		b.Write(buf)
	}
	return b.String(), nil
}

func dial(t *testing.T, addr string) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctx5s(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Arguments go out as length-prefixed bulk strings, so spaces, CRLF and
// binary bytes in a key cannot split or inject a command.
func TestCommandEncoding(t *testing.T) {
	addr, got := fakeServer(t, "+OK\r\n")
	c := dial(t, addr)
	if _, err := c.Do(ctx5s(t), "SET", "a b\r\nDEL x", "\x00\xff"); err != nil {
		t.Fatal(err)
	}
	want := "*3\r\n$3\r\nSET\r\n$10\r\na b\r\nDEL x\r\n$2\r\n\x00\xff\r\n"
	if g := <-got; g != want {
		t.Fatalf("sent %q, want %q", g, want)
	}
}

func TestReplies(t *testing.T) {
	for _, c := range []struct {
		name  string
		reply string
		want  any
	}{
		// A status reply is a string.
		{"simple", "+PONG\r\n", "PONG"},
		// Integers are int64, negative ones included.
		{"integer", ":-42\r\n", int64(-42)},
		// A bulk string may contain CRLF: its length decides, not the line.
		{"bulk", "$7\r\na\r\nb\r\nc\r\n", "a\r\nb\r\nc"},
		{"empty bulk", "$0\r\n\r\n", ""},
		// GET of a missing key.
		{"null bulk", "$-1\r\n", nil},
		{"null array", "*-1\r\n", nil},
		// SCAN's shape: cursor and a nested array.
		{"nested", "*2\r\n$1\r\n0\r\n*2\r\n$1\r\na\r\n:1\r\n", []any{"0", []any{"a", int64(1)}}},
		// EXEC with a failed command: the error stays a value in the array.
		{"error in array", "*2\r\n+OK\r\n-ERR no\r\n", []any{"OK", &Error{Msg: "ERR no"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr, _ := fakeServer(t, c.reply)
			v, err := dial(t, addr).Do(ctx5s(t), "X")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(v, c.want) {
				t.Fatalf("reply %q = %#v, want %#v", c.reply, v, c.want)
			}
		})
	}
}

func TestErrorReplyKeepsConnection(t *testing.T) {
	addr, _ := fakeServer(t, "-LOADING Redis is loading the dataset in memory\r\n")
	c := dial(t, addr)
	_, err := c.Do(ctx5s(t), "PING")
	var re *Error
	if !errors.As(err, &re) || re.Prefix() != "LOADING" {
		t.Fatalf("err = %v, want a LOADING *Error", err)
	}
	if c.closed {
		t.Fatal("an error reply closed the connection")
	}
}

func TestBadReplies(t *testing.T) {
	for _, c := range []struct {
		name  string
		reply string
	}{
		// More than the harness will ever allocate for one value.
		{"huge bulk", "$999999999999\r\n"},
		{"negative bulk", "$-2\r\n"},
		{"bad integer", ":12x\r\n"},
		// A bulk string whose length lies.
		{"unterminated bulk", "$1\r\nab\r\n"},
		// RESP3 types: the harness never asks for them.
		{"resp3 map", "%1\r\n+a\r\n+b\r\n"},
		{"empty line", "\r\n"},
		{"deep nesting", strings.Repeat("*1\r\n", 40) + ":1\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr, _ := fakeServer(t, c.reply)
			conn := dial(t, addr)
			_, err := conn.Do(ctx5s(t), "X")
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("reply %q: err = %v, want ErrProtocol", c.reply, err)
			}
			if !conn.closed {
				t.Fatal("connection kept after a protocol error")
			}
		})
	}
}

// A server that never answers: the context ends the call, and the Conn.
func TestContextEndsCall(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	c := dial(t, l.Addr().String())
	srv := <-accepted
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err = c.Do(ctx, "PING")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatal("cancel did not unblock the read")
	}
	if _, err := c.Do(context.Background(), "PING"); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("call after a cancelled one: %v, want net.ErrClosed", err)
	}

	dctx, dcancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer dcancel()
	c2 := dial(t, l.Addr().String())
	if _, err := c2.Do(dctx, "PING"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
}

func TestScan(t *testing.T) {
	addr, got := fakeServer(t, "*2\r\n$2\r\n17\r\n*2\r\n$3\r\nfg1\r\n$3\r\nfg2\r\n")
	keys, next, err := dial(t, addr).Scan(ctx5s(t), "0", "fg*", 100)
	if err != nil {
		t.Fatal(err)
	}
	if next != "17" || !reflect.DeepEqual(keys, []string{"fg1", "fg2"}) {
		t.Fatalf("SCAN = %v, %q", keys, next)
	}
	if g := <-got; !strings.Contains(g, "MATCH\r\n$3\r\nfg*\r\n$5\r\nCOUNT\r\n$3\r\n100") {
		t.Fatalf("sent %q", g)
	}
}

func TestParseInfo(t *testing.T) {
	m := ParseInfo("# Server\r\nredis_version:7.0.15\r\nprocess_id:123\r\n\r\n# Replication\r\nrole:slave\r\nmaster_host:127.0.0.1\r\n")
	want := map[string]string{"redis_version": "7.0.15", "process_id": "123", "role": "slave", "master_host": "127.0.0.1"}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("ParseInfo = %v", m)
	}
}

func TestEscapeGlob(t *testing.T) {
	if got := EscapeGlob(`fg:a*b?[c]\d`); got != `fg:a\*b\?\[c\]\\d` {
		t.Fatalf("EscapeGlob = %q", got)
	}
}
