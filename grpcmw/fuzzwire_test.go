package grpcmw_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fenceguard/fenceguard/grpcmw"
	"github.com/fenceguard/fenceguard/token"
)

// h2conn is an HTTP/2 client connection written by hand, one stream at a
// time, so that every header field reaches the server as it is sent.
type h2conn struct {
	c    net.Conn
	fr   *http2.Framer
	hbuf bytes.Buffer
	enc  *hpack.Encoder
	next uint32 // the next stream's id
}

func dialH2(addr string) (*h2conn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	h := &h2conn{c: c, fr: http2.NewFramer(c, c), next: 1}
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	h.enc = hpack.NewEncoder(&h.hbuf)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		c.Close()
		return nil, err
	}
	if err := h.fr.WriteSettings(); err != nil {
		c.Close()
		return nil, err
	}
	// A connection window no run of answers can use up.
	if err := h.fr.WriteWindowUpdate(0, 1<<30); err != nil {
		c.Close()
		return nil, err
	}
	return h, nil
}

// wireAnswer is what the server answered one stream.
type wireAnswer struct {
	msgs   []string
	status *status.Status // nil: the stream or the connection was reset
}

// stream sends one call of path with the header fields given and the
// messages msgs, then reads the answer. An error means the connection is
// no longer usable.
func (h *h2conn) stream(path string, fields [][2]string, msgs []string) (wireAnswer, error) {
	id := h.next
	h.next += 2
	_ = h.c.SetDeadline(time.Now().Add(10 * time.Second))
	h.hbuf.Reset()
	for _, f := range append([][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path}, {":authority", "fuzz"},
		{"content-type", "application/grpc"}, {"te", "trailers"}}, fields...) {
		if err := h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			return wireAnswer{}, err
		}
	}
	block := h.hbuf.Bytes()
	const frame = 16 << 10
	first := block[:min(len(block), frame)]
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first,
		EndHeaders: len(block) <= frame}); err != nil {
		return wireAnswer{}, err
	}
	for rest := block[len(first):]; len(rest) > 0; {
		n := min(len(rest), frame)
		if err := h.fr.WriteContinuation(id, n == len(rest), rest[:n]); err != nil {
			return wireAnswer{}, err
		}
		rest = rest[n:]
	}
	if len(msgs) == 0 {
		// The end of the client's side in an empty DATA frame, as grpc-go
		// sends it: grpc-go's server (v1.79.3) does not end a stream's input at
		// HEADERS carrying END_STREAM, and the call would wait for ever.
		if err := h.fr.WriteData(id, true, nil); err != nil {
			return wireAnswer{}, err
		}
	}
	for i, m := range msgs {
		b, _ := proto.Marshal(wrapperspb.String(m))
		body := make([]byte, 5, 5+len(b))
		binary.BigEndian.PutUint32(body[1:], uint32(len(b)))
		if err := h.fr.WriteData(id, i == len(msgs)-1, append(body, b...)); err != nil {
			return wireAnswer{}, err
		}
	}
	var a wireAnswer
	var data []byte
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return a, err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := h.fr.WriteSettingsAck(); err != nil {
					return a, err
				}
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				if err := h.fr.WritePing(true, f.Data); err != nil {
					return a, err
				}
			}
		case *http2.GoAwayFrame:
			return a, errors.New("GOAWAY")
		case *http2.DataFrame:
			if f.StreamID != id {
				continue
			}
			data = append(data, f.Data()...)
			for len(data) >= 5 {
				n := int(binary.BigEndian.Uint32(data[1:5]))
				if len(data) < 5+n {
					break
				}
				v := new(wrapperspb.StringValue)
				if err := proto.Unmarshal(data[5:5+n], v); err != nil {
					return a, err
				}
				a.msgs = append(a.msgs, v.GetValue())
				data = data[5+n:]
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return a, nil
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID != id {
				continue
			}
			code, msg, details := -1, "", ""
			for _, hf := range f.RegularFields() {
				switch hf.Name {
				case "grpc-status":
					code, _ = strconv.Atoi(hf.Value)
				case "grpc-message":
					msg = hf.Value
				case "grpc-status-details-bin":
					details = hf.Value
				}
			}
			if code < 0 {
				continue // the answer's headers; its trailers follow
			}
			a.status = status.New(codes.Code(code), msg)
			if details != "" {
				b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(details, "="))
				p := new(spb.Status)
				if err != nil || proto.Unmarshal(b, p) != nil {
					return a, fmt.Errorf("bad grpc-status-details-bin %q", details)
				}
				a.status = status.FromProto(p)
			}
			return a, nil
		}
	}
}

// execKey is the metadata key FuzzStreamOnTheWire marks its calls with,
// so that each run finds its own Fence and Outcomes.
const execKey = "fuzz-exec"

// execOf returns the run a call belongs to.
func execOf(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, execKey); len(v) > 0 {
		return v[0]
	}
	return ""
}

// execFence is a Fence per run: a run's claims go to its own fence even
// if a stream of an earlier run still claims.
type execFence struct{ m sync.Map } // run → *token.MemoryFence

func (f *execFence) Claim(ctx context.Context, key string, t token.Token) error {
	m, ok := f.m.Load(execOf(ctx))
	if !ok {
		return errors.New("no fence for this run")
	}
	return m.(*token.MemoryFence).Claim(ctx, key, t)
}

// FuzzStreamOnTheWire sends the Greet stream (which sends before it
// receives, then answers each message) to real servers on loopback as
// HTTP/2 frames written by hand, so that any header field, binary and
// repeated ones included, reaches grpc-go as sent; with and without
// KeyFromFirstMessage and CheckEachMessage. The server never panics (that
// would end the test process); an answer is OK, one of the documented
// refusals with its ErrorInfo, or grpc-go's own refusal before the
// interceptor saw the call; every message the client receives carries the
// key and token of a claim the Fence accepted for the call (none before
// it: no greeting goes out unfenced); and a mark moves only to an
// accepted claim's token.
//
//	go test -run '^$' -fuzz FuzzStreamOnTheWire -fuzztime 60s -fuzzminimizetime 2s ./grpcmw/
func FuzzStreamOnTheWire(f *testing.F) {
	for _, seed := range []struct {
		first, second string
		values        uint8
		binary        bool
		name, value   string
		m1, m2        string
		flags         uint8
		mark          uint64
	}{
		{"7", "", 1 + 1*4, false, "", "", "1", "", 0, 0},
		{"7", "", 1 + 2*4, false, "", "", "1", "2", fuzzFirstMessage, 0},
		{"7", "", 1 + 2*4, false, "", "", "1", "1", fuzzFirstMessage | fuzzEachMessage, 5},
		{"7", "", 1 + 1*4, false, "", "", "1", "", fuzzFirstMessage, 9},
		{"7", "8", 2 + 1*4, false, "", "", "1", "", fuzzFirstMessage, 0},
		{"7", "", 0 + 1*4, true, "", "", "1", "", fuzzFirstMessage, 0},
		{"7", "", 1 + 1*4, true, "", "", "1", "", 0, 0},
		{"NyA=", "", 0 + 1*4, true, "", "", "1", "", 0, 0},
		{"7", "", 0 + 1*4, false, "X-Fencing-Token", "7", "1", "", fuzzFirstMessage, 0},
		{"7", "", 1 + 1*4, false, "x-fencing-token", "7", "1", "", 0, 0},
		{"\u0667", "", 1 + 1*4, false, "", "", "1", "", 0, 0},
		{"7\x00", "", 1 + 1*4, false, "", "", "1", "", 0, 0},
		{strings.Repeat("9", 20<<10), "", 1 + 1*4, false, "", "", "1", "", 0, 0},
		{"7", "", 1 + 2*4, false, "", "", "", "\xff", fuzzFirstMessage, 0},
		{"7", "", 1 + 0*4, false, "", "", "", "", fuzzFirstMessage, 0},
	} {
		f.Add(seed.first, seed.second, seed.values, seed.binary, seed.name, seed.value, seed.m1, seed.m2, seed.flags, seed.mark)
	}
	fences := new(execFence)
	var mu sync.Mutex
	outcomes := map[string][]grpcmw.Outcome{} // by run
	type target struct {
		addr string
		conn *h2conn
	}
	var targets [4]*target // by KeyFromFirstMessage and CheckEachMessage
	for i := range targets {
		o := grpcmw.Options{
			Resource: func(ctx context.Context, method string, req any) (string, error) {
				if req == nil {
					if i&fuzzFirstMessage == 0 {
						return "greet", nil
					}
					return "", errors.New("a Greet's key comes from its first message")
				}
				return skuKey(ctx, methodTake, req)
			},
			Fence:            fences,
			Check:            token.NoCheck(),
			CheckEachMessage: i&fuzzEachMessage != 0,
			Observe: func(ctx context.Context, _ string, o grpcmw.Outcome) {
				mu.Lock()
				defer mu.Unlock()
				outcomes[execOf(ctx)] = append(outcomes[execOf(ctx)], o)
			},
		}
		if i&fuzzFirstMessage != 0 {
			o.KeyFromFirstMessage = func(m string) bool { return m == methodGreet }
		}
		targets[i] = &target{addr: startServer(f, o).addr}
	}
	f.Cleanup(func() {
		for _, t := range targets {
			if t.conn != nil {
				t.conn.c.Close()
			}
		}
	})
	run := 0
	f.Fuzz(func(t *testing.T, first, second string, values uint8, binary bool, name, value, m1, m2 string, flags uint8, mark uint64) {
		run++
		exec := strconv.Itoa(run)
		fields := [][2]string{{execKey, exec}}
		for i := range int(values % 4) {
			v := first
			if i > 0 {
				v = second
			}
			fields = append(fields, [2]string{grpcmw.MetadataKey, v})
		}
		if binary {
			fields = append(fields, [2]string{grpcmw.MetadataKey + "-bin", first})
		}
		if name != "" {
			fields = append(fields, [2]string{name, value})
		}
		msgs := []string{m1, m2}[:int(values/4)%3]
		for i, m := range msgs {
			if len(m) > 1<<10 {
				msgs[i] = m[:1<<10]
			}
		}

		mem := &token.MemoryFence{Check: token.NoCheck()}
		keys := map[string]token.Token{"greet": 0}
		for _, m := range msgs {
			if k, err := skuKey(context.Background(), methodTake, wrapperspb.String(m)); err == nil {
				keys[k] = 0
			}
		}
		for k := range keys {
			if mark != 0 {
				if err := mem.Claim(context.Background(), k, token.Token(mark)); err != nil {
					t.Fatal(err)
				}
			}
			keys[k] = mem.HighWater(k)
		}
		fences.m.Store(exec, mem)
		defer fences.m.Delete(exec)

		tg := targets[flags&(fuzzFirstMessage|fuzzEachMessage)]
		if tg.conn == nil {
			c, err := dialH2(tg.addr)
			if err != nil {
				t.Fatal(err)
			}
			tg.conn = c
		}
		a, err := tg.conn.stream(methodGreet, fields, msgs)
		if err != nil { // the server ended the connection: the next run dials again
			tg.conn.c.Close()
			tg.conn = nil
		}
		mu.Lock()
		seen := outcomes[exec]
		delete(outcomes, exec)
		mu.Unlock()

		var acc *grpcmw.Outcome
		refused := false
		for i, o := range seen {
			switch o.Result {
			case grpcmw.ResultAccepted:
				acc = &seen[i]
			case grpcmw.ResultUnfenced:
				t.Fatalf("a call to a method that requires a token passed unfenced: %+v", seen)
			default:
				refused = true
			}
		}
		if st := a.status; st != nil && st.Code() != codes.OK {
			switch st.Code() {
			case codes.FailedPrecondition, codes.InvalidArgument, codes.PermissionDenied, codes.Aborted, codes.Unavailable:
				if refused && errorInfo(st.Err()) == nil {
					t.Fatalf("refusal %v without its ErrorInfo (outcomes %+v)", st.Err(), seen)
				}
			case codes.Internal:
				// grpc-go's own answer to a message it cannot decode (a
				// string that is not UTF-8), after the interceptor saw the
				// call, or to metadata it refuses, before.
				if len(seen) != 0 && !slices.ContainsFunc(msgs, func(m string) bool { return !utf8.ValidString(m) }) {
					t.Fatalf("status %v after the interceptor saw the call: %+v", st.Err(), seen)
				}
			default:
				if len(seen) != 0 {
					t.Fatalf("status %v after the interceptor saw the call: %+v", st.Err(), seen)
				}
			}
		}
		if acc != nil {
			sent := false
			for _, f := range fields {
				sent = sent || f[0] == grpcmw.MetadataKey && f[1] == acc.Token.String()
			}
			if !sent {
				t.Fatalf("accepted %d, which was not sent: %q", acc.Token, fields)
			}
			if acc.Token < keys[acc.Resource] {
				t.Fatalf("accepted %d below the mark %d of %q", acc.Token, keys[acc.Resource], acc.Resource)
			}
		}
		for _, m := range a.msgs {
			v := strings.TrimPrefix(m, "hello ")
			if acc == nil || v != acc.Resource+"="+acc.Token.String() {
				t.Fatalf("received %q; accepted %+v", m, acc)
			}
		}
		for k, before := range keys {
			after := mem.HighWater(k)
			if after != before && (acc == nil || acc.Resource != k || acc.Token != after) {
				t.Fatalf("the mark of %q moved from %d to %d; accepted %+v", k, before, after, acc)
			}
		}
	})
}
