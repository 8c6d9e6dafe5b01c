package grpcmw_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fenceguard/fenceguard/grpcmw"
	"github.com/fenceguard/fenceguard/token"
)

// loopFramedCall sends one unary call to the loop service's Put as
// hand-written HTTP/2 frames: the header fields given (names as they are,
// upper case included), the request for key, and, if trailer is not nil,
// a trailing HEADERS frame with those fields after the data. It returns
// the grpc-status the server answers, or -1 if it reset the stream or
// answered none.
func loopFramedCall(t *testing.T, addr, key string, fields, trailer [][2]string) int {
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
	block := func(fields [][2]string) []byte {
		var b bytes.Buffer
		enc := hpack.NewEncoder(&b)
		for _, f := range fields {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		return b.Bytes()
	}
	head := append([][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", loopUnary}, {":authority", addr},
		{"content-type", "application/grpc"}, {"te", "trailers"}}, fields...)
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(head), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	msg, _ := proto.Marshal(wrapperspb.String(key))
	body := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:], uint32(len(msg)))
	if err := fr.WriteData(1, trailer == nil, append(body, msg...)); err != nil {
		t.Fatal(err)
	}
	if trailer != nil {
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(trailer), EndHeaders: true, EndStream: true}); err != nil {
			t.Fatal(err)
		}
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return -1
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
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

// TestHeaderSpellingsOnTheWire sends the token under header names and in
// places grpc-go's client never uses — upper case beside lower case, a
// client trailer — and checks that none is served and none moves a mark:
// grpc-go resets a stream with an upper-case header name or a client
// trailer, and the interceptor reads the token from the headers alone.
func TestHeaderSpellingsOnTheWire(t *testing.T) {
	fence := new(token.MemoryFence)
	fg := newLoopInterceptor(t, grpcmw.Options{Fence: fence})
	addr := loopServeAddr(t, fg)
	if code := loopFramedCall(t, addr, "k", [][2]string{{grpcmw.MetadataKey, "10"}}, nil); code != int(codes.OK) {
		t.Fatalf("valid hand-written call = %d, want 0", code)
	}
	for _, tc := range []struct {
		name            string
		fields, trailer [][2]string
		want            int // grpc-status if not a reset stream
	}{
		{"upper-case name alone", [][2]string{{"X-Fencing-Token", "20"}}, nil, -1},
		{"upper-case beside lower-case", [][2]string{{"X-Fencing-Token", "20"}, {grpcmw.MetadataKey, "5"}}, nil, -1},
		{"mixed-case binary beside text", [][2]string{{grpcmw.MetadataKey, "20"}, {"X-Fencing-Token-Bin", "MjA"}}, nil, -1},
		{"token only in a client trailer", nil, [][2]string{{grpcmw.MetadataKey, "20"}}, int(codes.FailedPrecondition)},
		{"stale token, fresh one in a trailer", [][2]string{{grpcmw.MetadataKey, "5"}}, [][2]string{{grpcmw.MetadataKey, "20"}}, int(codes.Aborted)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code := loopFramedCall(t, addr, "k", tc.fields, tc.trailer)
			if code == int(codes.OK) || code != tc.want && code != -1 {
				t.Errorf("status %d, want %d or a reset stream", code, tc.want)
			}
			if hw := fence.HighWater("k"); hw != 10 {
				t.Errorf("mark moved to %d", hw)
			}
		})
	}
}
