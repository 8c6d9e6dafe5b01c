package grpcmw_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/fenceguard/fenceguard/grpcmw"
	"github.com/fenceguard/fenceguard/token"
)

// withToken returns ctx with the given x-fencing-token values in its
// outgoing metadata, as a client that sets them by hand sends them.
func withToken(ctx context.Context, vals ...string) context.Context {
	kv := make([]string, 0, 2*len(vals))
	for _, v := range vals {
		kv = append(kv, grpcmw.MetadataKey, v)
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// errFenceDown is what a Fence whose store is unreachable returns.
var errFenceDown = errors.New("connection refused")

type downFence struct{}

func (downFence) Claim(context.Context, string, token.Token) error { return errFenceDown }

// Every refusal answers its status code with an ErrorInfo of its reason,
// the handler does not run, and no mark moves; an accepted call reaches
// the handler with key and token in its context.
func TestStatusCodes(t *testing.T) {
	ctx := context.Background()
	now := token.Token(time.Now().UnixMicro())
	fence := &token.MemoryFence{}
	s := startServer(t, testOptions(fence))
	if err := fence.Claim(ctx, "sku:1", now); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		method  string
		sku     string
		vals    []string
		code    codes.Code
		reason  string
		meta    map[string]string // ErrorInfo metadata expected
		handled string            // what the handler saw, when it ran
	}{
		{name: "accepted equal to the mark", method: methodTake, sku: "1", vals: []string{now.String()}, handled: "sku:1=" + now.String()},
		{name: "accepted above the mark", method: methodTake, sku: "2", vals: []string{"7"}, handled: "sku:2=7"},
		{name: "read without a token passes unfenced", method: methodRead, sku: "1", handled: "-"},
		{name: "read with a token claims", method: methodRead, sku: "3", vals: []string{"9"}, handled: "sku:3=9"},
		{name: "unfenced method with any metadata", method: methodPing, sku: "1", vals: []string{"x", "y"}, handled: "-"},
		{name: "stale", method: methodTake, sku: "1", vals: []string{"5"}, code: codes.Aborted, reason: grpcmw.ReasonStale,
			meta: map[string]string{"resource": "sku:1", "presented": "5", "current": now.String()}},
		{name: "missing", method: methodTake, sku: "1", code: codes.FailedPrecondition, reason: grpcmw.ReasonMissing, meta: map[string]string{}},
		{name: "malformed", method: methodTake, sku: "1", vals: []string{"05"}, code: codes.InvalidArgument, reason: grpcmw.ReasonInvalid, meta: map[string]string{}},
		{name: "zero", method: methodTake, sku: "1", vals: []string{"0"}, code: codes.InvalidArgument, reason: grpcmw.ReasonInvalid, meta: map[string]string{}},
		{name: "two values", method: methodTake, sku: "1", vals: []string{now.String(), now.String()}, code: codes.InvalidArgument, reason: grpcmw.ReasonInvalid, meta: map[string]string{}},
		{name: "beyond 64 bits", method: methodTake, sku: "1", vals: []string{"18446744073709551616"}, code: codes.InvalidArgument, reason: grpcmw.ReasonInvalid, meta: map[string]string{}},
		{name: "no resource", method: methodTake, sku: "", vals: []string{"5"}, code: codes.InvalidArgument, reason: grpcmw.ReasonNoResource, meta: map[string]string{}},
		{name: "forged above the clock bound", method: methodTake, sku: "1", vals: []string{strconv.FormatUint(math.MaxUint64, 10)}, code: codes.PermissionDenied, reason: grpcmw.ReasonForged,
			meta: map[string]string{"presented": strconv.FormatUint(math.MaxUint64, 10)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := s.stock.calls.Load()
			marks := map[string]token.Token{"sku:1": fence.HighWater("sku:1"), "sku:" + tc.sku: fence.HighWater("sku:" + tc.sku)}
			got, err := call(withToken(ctx, tc.vals...), s.conn, tc.method, tc.sku)
			if tc.code == codes.OK {
				if err != nil || got != tc.handled {
					t.Fatalf("call = %q, %v; want %q", got, err, tc.handled)
				}
				return
			}
			ei := wantRefusal(t, err, tc.code, tc.reason)
			md := ei.GetMetadata()
			if tc.reason == grpcmw.ReasonForged {
				if md["bound"] == "" {
					t.Errorf("forged: no bound in %v", md)
				}
				delete(md, "bound")
			}
			if len(md) != len(tc.meta) {
				t.Errorf("metadata = %v, want %v", md, tc.meta)
			}
			for k, v := range tc.meta {
				if md[k] != v {
					t.Errorf("metadata[%q] = %q, want %q", k, md[k], v)
				}
			}
			if n := s.stock.calls.Load() - before; n != 0 {
				t.Errorf("the handler ran %d times on a refusal", n)
			}
			for k, hw := range marks {
				if got := fence.HighWater(k); got != hw {
					t.Errorf("mark of %s moved from %d to %d on a refusal", k, hw, got)
				}
			}
		})
	}
}

// A Fence that cannot decide, and a Check that cannot, refuse UNAVAILABLE:
// not knowing is refusing.
func TestUnavailable(t *testing.T) {
	ctx := withToken(context.Background(), "5")
	o := testOptions(downFence{})
	s := startServer(t, o)
	_, err := call(ctx, s.conn, methodTake, "1")
	wantRefusal(t, err, codes.Unavailable, grpcmw.ReasonUnavailable)

	fence := &token.MemoryFence{}
	o = testOptions(fence)
	o.Check = token.CheckFunc(func(context.Context, string, token.Token) error { return errFenceDown })
	s = startServer(t, o)
	_, err = call(ctx, s.conn, methodTake, "1")
	wantRefusal(t, err, codes.Unavailable, grpcmw.ReasonUnavailable)
	if n := s.stock.calls.Load(); n != 0 || fence.HighWater("sku:1") != 0 {
		t.Errorf("handler ran %d times, mark %d, on an undecided check", n, fence.HighWater("sku:1"))
	}
}

// A token beyond what the Fence's store holds (PostgreSQL's bigint) is
// refused INVALID_ARGUMENT, as a malformed one is.
func TestOutOfStoreRange(t *testing.T) {
	rangeFence := fenceFunc(func(_ context.Context, _ string, t token.Token) error {
		return &token.RangeError{What: "PostgreSQL bigint", Token: t, Max: token.MaxInt64}
	})
	o := testOptions(rangeFence)
	o.Check = token.NoCheck()
	s := startServer(t, o)
	_, err := call(withToken(context.Background(), "9223372036854775808"), s.conn, methodTake, "1")
	wantRefusal(t, err, codes.InvalidArgument, grpcmw.ReasonInvalid)
}

type fenceFunc func(ctx context.Context, resource string, t token.Token) error

func (f fenceFunc) Claim(ctx context.Context, resource string, t token.Token) error {
	return f(ctx, resource, t)
}

// New refuses options without a Resource or a Fence.
func TestNewRequiresResourceAndFence(t *testing.T) {
	if _, err := grpcmw.New(grpcmw.Options{Fence: &token.MemoryFence{}}); err == nil {
		t.Error("New without Resource succeeded")
	}
	if _, err := grpcmw.New(grpcmw.Options{Resource: skuKey}); err == nil {
		t.Error("New without Fence succeeded")
	}
}
