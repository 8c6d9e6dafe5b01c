package grpcmw_test

import (
	"context"
	"math"
	"strconv"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/fenceguard/fenceguard/grpcmw"
	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/token"
)

// Observe sees every decision on a fenced method once, with its result
// and code — the refusals made before the Check and the Fence see the
// call included — and nothing of an unfenced method.
func TestObserveSeesEveryDecision(t *testing.T) {
	ctx := context.Background()
	fence := &token.MemoryFence{}
	if err := fence.Claim(ctx, "sku:1", 10); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []grpcmw.Outcome
	o := testOptions(fence)
	o.Observe = func(_ context.Context, _ string, oc grpcmw.Outcome) {
		mu.Lock()
		got = append(got, oc)
		mu.Unlock()
	}
	s := startServer(t, o)
	for _, c := range []struct {
		method, sku string
		vals        []string
	}{
		{methodTake, "1", []string{"10"}},
		{methodRead, "1", nil},
		{methodTake, "1", nil},
		{methodTake, "1", []string{"x"}},
		{methodTake, "", []string{"10"}},
		{methodTake, "1", []string{strconv.FormatUint(math.MaxUint64, 10)}},
		{methodTake, "1", []string{"9"}},
		{methodPing, "1", []string{"9"}},
	} {
		_, _ = call(withToken(ctx, c.vals...), s.conn, c.method, c.sku)
	}
	want := []struct {
		r    grpcmw.Result
		code codes.Code
		key  string
	}{
		{grpcmw.ResultAccepted, codes.OK, "sku:1"},
		{grpcmw.ResultUnfenced, codes.OK, ""},
		{grpcmw.ResultMissing, codes.FailedPrecondition, ""},
		{grpcmw.ResultInvalid, codes.InvalidArgument, ""},
		{grpcmw.ResultNoResource, codes.InvalidArgument, ""},
		{grpcmw.ResultForged, codes.PermissionDenied, "sku:1"},
		{grpcmw.ResultStale, codes.Aborted, "sku:1"},
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(want) {
		t.Fatalf("observed %d outcomes, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].Result != w.r || got[i].Code != w.code || got[i].Resource != w.key {
			t.Errorf("outcome %d = %+v, want %v %v %q", i, got[i], w.r, w.code, w.key)
		}
		if (w.code == codes.OK) != (got[i].Err == nil) {
			t.Errorf("outcome %d: Err = %v", i, got[i].Err)
		}
	}
}

// Each Result is spelt as httpmw's, so that a metric of both middlewares
// (metrics/prom's GRPC and HTTP, which count any other string as
// "other") has one set of result labels.
func TestResultsAreHTTPMiddlewares(t *testing.T) {
	for _, r := range []struct {
		grpc grpcmw.Result
		http httpmw.Result
	}{
		{grpcmw.ResultAccepted, httpmw.ResultAccepted},
		{grpcmw.ResultUnfenced, httpmw.ResultUnfenced},
		{grpcmw.ResultMissing, httpmw.ResultMissing},
		{grpcmw.ResultInvalid, httpmw.ResultInvalid},
		{grpcmw.ResultNoResource, httpmw.ResultNoResource},
		{grpcmw.ResultForged, httpmw.ResultForged},
		{grpcmw.ResultStale, httpmw.ResultStale},
		{grpcmw.ResultUnavailable, httpmw.ResultUnavailable},
	} {
		if string(r.grpc) != string(r.http) {
			t.Errorf("grpcmw's %q is httpmw's %q", r.grpc, r.http)
		}
	}
}
