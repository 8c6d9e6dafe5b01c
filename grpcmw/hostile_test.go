package grpcmw_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fenceguard/fenceguard/grpcmw"
	"github.com/fenceguard/fenceguard/token"
)

// rawCall sends one unary call to the Stock service as raw HTTP/2 frames,
// with the header fields given, and returns its status: what a client
// that does not go through grpc-go can send, byte for byte.
func rawCall(t *testing.T, addr, method, sku string, fields [][2]string) *status.Status {
	t.Helper()
	tr := &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	defer tr.CloseIdleConnections()
	msg, err := proto.Marshal(wrapperspb.String(sku))
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:], uint32(len(msg)))
	body = append(body, msg...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+method, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header["Content-Type"] = []string{"application/grpc"}
	req.Header["Te"] = []string{"trailers"}
	for _, f := range fields {
		req.Header[f[0]] = append(req.Header[f[0]], f[1])
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		// The HTTP/2 layer refused to send it: nothing reached the server.
		return status.New(codes.Unavailable, "not sent: "+err.Error())
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	h := resp.Trailer
	if h.Get("Grpc-Status") == "" {
		h = resp.Header // a trailers-only answer
	}
	code, err := strconv.Atoi(h.Get("Grpc-Status"))
	if err != nil {
		t.Fatalf("HTTP %d, no grpc-status", resp.StatusCode)
	}
	if d := h.Get("Grpc-Status-Details-Bin"); d != "" {
		b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(d, "="))
		if err != nil {
			t.Fatal(err)
		}
		p := new(spb.Status)
		if err := proto.Unmarshal(b, p); err != nil {
			t.Fatal(err)
		}
		return status.FromProto(p)
	}
	return status.New(codes.Code(code), h.Get("Grpc-Message"))
}

// Hostile metadata never reaches the handler, never moves a mark, and
// never panics the server (a panic in an interceptor kills the process);
// each row is refused with its code.
func TestHostileMetadata(t *testing.T) {
	ctx := context.Background()
	fence := &token.MemoryFence{}
	s := startServer(t, testOptions(fence))
	now := token.Token(time.Now().UnixMicro())
	if err := fence.Claim(ctx, "sku:1", now); err != nil {
		t.Fatal(err)
	}
	valid := (now + 1).String() // would be accepted, and move the mark
	const key = grpcmw.MetadataKey
	b64 := func(s string) string { return base64.RawStdEncoding.EncodeToString([]byte(s)) }
	for _, tc := range []struct {
		name   string
		fields [][2]string
		code   codes.Code // codes.Unknown: any refusal
	}{
		// The token as binary metadata: refused, not ignored, so a client
		// that believes it sent a token is never served unfenced.
		{"binary key alone", [][2]string{{key + "-bin", b64(valid)}}, codes.InvalidArgument},
		// Beside a valid text value, the binary one still refuses: which
		// one a proxy or a log saw is not known.
		{"binary key beside a valid value", [][2]string{{key, valid}, {key + "-bin", b64(valid)}}, codes.InvalidArgument},
		// An empty binary value is still the binary key.
		{"empty binary value", [][2]string{{key, valid}, {key + "-bin", ""}}, codes.InvalidArgument},
		// Two values, whichever comes first.
		{"repeated valid values", [][2]string{{key, valid}, {key, valid}}, codes.InvalidArgument},
		{"an empty value and a valid one", [][2]string{{key, ""}, {key, valid}}, codes.InvalidArgument},
		{"a stale value and a valid one", [][2]string{{key, "5"}, {key, valid}}, codes.InvalidArgument},
		// Two values joined in one field, as a proxy may fold them.
		{"comma-joined values", [][2]string{{key, valid + "," + valid}}, codes.InvalidArgument},
		// A value of 8 KiB digits: refused by the parser at its length.
		{"huge value", [][2]string{{key, strings.Repeat("9", 8<<10)}}, codes.InvalidArgument},
		// 1 MiB: within gRPC's header limit, so the interceptor sees it.
		{"value of 1 MiB", [][2]string{{key, strings.Repeat("1", 1<<20)}}, codes.InvalidArgument},
		// Digits that are not ASCII digits.
		{"fullwidth digits", [][2]string{{key, "１２３"}}, codes.InvalidArgument},
		{"Arabic-Indic digits", [][2]string{{key, "٣٤٥"}}, codes.InvalidArgument},
		{"a zero-width space after the token", [][2]string{{key, valid + "\u200b"}}, codes.InvalidArgument},
		{"invalid UTF-8", [][2]string{{key, "\xff\xfe" + valid}}, codes.InvalidArgument},
		{"sign", [][2]string{{key, "+" + valid}}, codes.InvalidArgument},
		{"hex", [][2]string{{key, "0x1f"}}, codes.InvalidArgument},
		{"exponent", [][2]string{{key, "1e18"}}, codes.InvalidArgument},
		// The key spelt in upper case is the same key on the wire.
		{"upper-case key, bad value", [][2]string{{"X-Fencing-Token", "abc"}}, codes.InvalidArgument},
		// A look-alike key is not the key: the call carries no token.
		{"look-alike key", [][2]string{{"x-fencing-token_", valid}}, codes.FailedPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, n := s.stock.calls.Load(), fence.Len()
			st := rawCall(t, s.addr, methodTake, "1", tc.fields)
			if st.Code() == codes.OK {
				t.Fatal("accepted")
			}
			if tc.code != codes.Unknown && st.Code() != tc.code {
				t.Errorf("code = %v (%s), want %v", st.Code(), truncate(st.Message()), tc.code)
			}
			if got := s.stock.calls.Load(); got != before {
				t.Error("the handler ran")
			}
			if hw := fence.HighWater("sku:1"); hw != now {
				t.Errorf("mark moved from %d to %d", now, hw)
			}
			if fence.Len() != n {
				t.Errorf("the fence grew from %d to %d keys", n, fence.Len())
			}
		})
	}
	// The server still serves: the same wire path with a valid token.
	if st := rawCall(t, s.addr, methodTake, "1", [][2]string{{key, valid}}); st.Code() != codes.OK {
		t.Fatalf("valid call = %v", st.Err())
	}
	if hw := fence.HighWater("sku:1"); hw != now+1 {
		t.Fatalf("mark = %d after a valid call, want %d", hw, now+1)
	}
}

// framedCall sends one unary call as HTTP/2 frames written by hand, with
// path as the :path pseudo-header whatever it is (net/http's client
// refuses a path without its leading '/'), and returns the grpc-status
// the server answers, or -1 if it answered none.
func framedCall(t *testing.T, addr, path, sku string) int {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path}, {":authority", addr},
		{"content-type", "application/grpc"}, {"te", "trailers"}, {grpcmw.MetadataKey, "7"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	msg, _ := proto.Marshal(wrapperspb.String(sku))
	body := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:], uint32(len(msg)))
	if err := fr.WriteData(1, true, append(body, msg...)); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return -1 // the connection ended without a status
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if v := f.PseudoValue("status"); v != "" && v != "200" {
				return -1
			}
			for _, hf := range f.RegularFields() {
				if hf.Name == "grpc-status" {
					code, _ := strconv.Atoi(hf.Value)
					return code
				}
			}
		case *http2.RSTStreamFrame, *http2.GoAwayFrame:
			return -1
		}
	}
}

// A method spelt without its leading '/' is refused by grpc-go (v1.79.3
// and later) before any interceptor runs, so Options.Fenced and Resource,
// which decide by the method's name, see every method in one spelling:
// such a call is not served, fenced or unfenced.
func TestMethodWithoutLeadingSlash(t *testing.T) {
	fence := &token.MemoryFence{}
	s := startServer(t, testOptions(fence))
	if code := framedCall(t, s.addr, methodPing, "1"); code != int(codes.OK) {
		t.Fatalf("Ping spelt right = status %d, want 0: the hand-written call does not work", code)
	}
	for _, m := range []string{methodPing, methodTake} {
		if code := framedCall(t, s.addr, strings.TrimPrefix(m, "/"), "1"); code == int(codes.OK) {
			t.Errorf("%s without its leading '/' was served", m)
		}
	}
	if n := s.stock.calls.Load(); n != 1 {
		t.Errorf("handler calls = %d, want 1 (Ping spelt right)", n)
	}
	if hw := fence.HighWater("sku:1"); hw != 0 {
		t.Errorf("mark = %d", hw)
	}
}
