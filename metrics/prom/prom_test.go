package prom_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/metrics/prom"
	"github.com/fenceguard/fenceguard/token"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newMetrics(t *testing.T, o prom.Options) (*prom.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := prom.New(reg, o)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

func byPrefix(key string) string { c, _, _ := strings.Cut(key, ":"); return c }

// A lease goes through acquire → loss (deleted behind its back) →
// reacquire → release; the counters say exactly that.
func TestLeaseLifecycle(t *testing.T) {
	m, reg := newMetrics(t, prom.Options{Class: byPrefix})
	ml := memlock.New()
	g, err := guard.New(ml, guard.Options{TTL: 5 * time.Second, RenewInterval: 50 * time.Millisecond, Observer: m.Observe, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lease, err := g.Acquire(ctx, "sku:1")
	if err != nil {
		t.Fatal(err)
	}
	// Two renewals, however late the scheduler runs the keep-alive (a long
	// TTL, so that a stall cannot lose the lease before Break does).
	harness.Eventually(t, 10*time.Second, func() error {
		if n := sum(t, reg, "fenceguard_renewals_total"); n < 2 {
			return fmt.Errorf("%v renewals recorded, want 2", n)
		}
		return nil
	})
	ml.Break("sku:1")
	<-lease.Context().Done()
	_ = lease.Release(ctx)
	again, err := g.Acquire(ctx, "sku:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Release(ctx); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP fenceguard_acquisitions_total Leases granted.
# TYPE fenceguard_acquisitions_total counter
fenceguard_acquisitions_total{class="sku"} 2
# HELP fenceguard_leases_held Leases currently held by this process.
# TYPE fenceguard_leases_held gauge
fenceguard_leases_held{class="sku"} 0
# HELP fenceguard_leases_lost_total Leases lost while held: refused (the grant was gone), deadline (renewals failed too long), other.
# TYPE fenceguard_leases_lost_total counter
fenceguard_leases_lost_total{cause="refused",class="sku"} 1
# HELP fenceguard_releases_total Leases released while held.
# TYPE fenceguard_releases_total counter
fenceguard_releases_total{class="sku"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"fenceguard_acquisitions_total", "fenceguard_leases_held", "fenceguard_leases_lost_total", "fenceguard_releases_total"); err != nil {
		t.Fatal(err)
	}
	if n := sum(t, reg, "fenceguard_renewals_total"); n < 2 {
		t.Errorf("%v renewals recorded, want at least 2", n)
	}
}

// sum adds up every series of the counter name.
func sum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

func TestClaims(t *testing.T) {
	m, reg := newMetrics(t, prom.Options{Class: byPrefix, TrackHighWater: func(r string) bool { return r == "sku:hot" }})
	f := m.Fence(&token.MemoryFence{})
	ctx := context.Background()
	_ = f.Claim(ctx, "sku:hot", 5)
	_ = f.Claim(ctx, "sku:hot", 7)
	_ = f.Claim(ctx, "sku:hot", 6)                           // stale
	_ = f.Claim(ctx, "sku:hot", 1<<62)                       // forged: the fence's default clock bound
	_ = f.Claim(ctx, "sku:cold", 0)                          // invalid
	_ = f.Claim(ctx, "", 3)                                  // invalid
	m.Claim("sku:cold", 9, errors.New("connection refused")) // an enforcer's failed check
	m.Claim("sku:cold", 1<<63, fmt.Errorf("update: %w",      // beyond the store: bad input
		&token.RangeError{What: "PostgreSQL bigint", Token: 1 << 63, Max: token.MaxInt64}))
	want := `
# HELP fenceguard_claims_total Resource-side token checks: accepted, stale (refused, lower than the high-water), forged (refused, above any token the lock can have granted), invalid (bad input), error (check not made).
# TYPE fenceguard_claims_total counter
fenceguard_claims_total{class="",result="invalid"} 1
fenceguard_claims_total{class="sku",result="accepted"} 2
fenceguard_claims_total{class="sku",result="error"} 1
fenceguard_claims_total{class="sku",result="forged"} 1
fenceguard_claims_total{class="sku",result="invalid"} 2
fenceguard_claims_total{class="sku",result="stale"} 1
# HELP fenceguard_high_water Highest token accepted, for tracked resources only.
# TYPE fenceguard_high_water gauge
fenceguard_high_water{resource="sku:hot"} 7
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fenceguard_claims_total", "fenceguard_high_water"); err != nil {
		t.Fatal(err)
	}
}

// A check wrapped by Check records its refusals — forged, or error when
// it could not decide — and nothing for the tokens it lets through, which
// the Fence records. Through httpmw, every request counts once.
func TestCheckRefusals(t *testing.T) {
	m, reg := newMetrics(t, prom.Options{Class: byPrefix})
	errDown := errors.New("lock service down")
	down := false
	inner := token.All(token.ClockBound{}, token.CheckFunc(func(context.Context, string, token.Token) error {
		if down {
			return errDown
		}
		return nil
	}))
	mw, err := httpmw.New(httpmw.Options{
		Resource: httpmw.PathValue("sku"),
		Fence:    m.Fence(&token.MemoryFence{Check: token.NoCheck()}),
		Check:    m.Check(inner),
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("PUT /sku/{sku}", mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	put := func(tok string) int {
		r := httptest.NewRequest(http.MethodPut, "/sku/42", nil)
		r.Header.Set(token.Header, tok)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w.Code
	}
	for _, step := range []struct {
		tok    string
		status int
	}{
		{"7", http.StatusOK},          // accepted: counted by the Fence
		{"6", http.StatusConflict},    // stale: counted by the Fence
		{"4611686018427387904", 403},  // forged: counted by the check
		{"18446744073709551615", 403}, // forged
	} {
		if got := put(step.tok); got != step.status {
			t.Fatalf("token %s: status %d, want %d", step.tok, got, step.status)
		}
	}
	down = true
	if got := put("8"); got != http.StatusServiceUnavailable {
		t.Fatalf("check down: status %d", got)
	}
	if err := m.Check(nil).Check(context.Background(), "sku:1", 1<<62); !errors.Is(err, token.ErrForged) {
		t.Errorf("Check(nil) is not the default check: %v", err)
	}
	want := `
# HELP fenceguard_claims_total Resource-side token checks: accepted, stale (refused, lower than the high-water), forged (refused, above any token the lock can have granted), invalid (bad input), error (check not made).
# TYPE fenceguard_claims_total counter
fenceguard_claims_total{class="sku",result="accepted"} 1
fenceguard_claims_total{class="sku",result="error"} 1
fenceguard_claims_total{class="sku",result="forged"} 3
fenceguard_claims_total{class="sku",result="stale"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fenceguard_claims_total"); err != nil {
		t.Fatal(err)
	}
}

// Ten thousand distinct keys, even with a Class that returns the key
// itself, produce at most MaxClasses+1 series per metric.
func TestCardinalityStaysBounded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		class func(string) string
		max   int
	}{
		{"default class", nil, 1},
		{"class per key, capped", func(k string) string { return k }, 21},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, reg := newMetrics(t, prom.Options{Class: tc.class, MaxClasses: 20})
			f := m.Fence(&token.MemoryFence{})
			for i := range 10_000 {
				key := fmt.Sprintf("sku:%d", i)
				m.Observe(guard.Event{Kind: guard.Acquired, Key: key, Token: token.Token(i + 1), Duration: time.Millisecond})
				m.Observe(guard.Event{Kind: guard.Released, Key: key, Token: token.Token(i + 1), Duration: time.Millisecond})
				_ = f.Claim(context.Background(), key, token.Token(i+1))
			}
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, mf := range mfs {
				if n := len(mf.GetMetric()); n > tc.max {
					t.Errorf("%s has %d series, want at most %d", mf.GetName(), n, tc.max)
				}
			}
		})
	}
}

func TestRegisterTwiceFails(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := prom.New(reg, prom.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := prom.New(reg, prom.Options{}); err == nil {
		t.Fatal("registering the same metrics twice succeeded")
	}
}

// Issue 18 #5: a burst of garbage headers — malformed, too long, doubled,
// missing — never reaches a Fence or a Check, yet every one is counted,
// with the refusals that do reach them and the 503 of a store that is
// down, each request once.
func TestHTTPCountsEveryRefusal(t *testing.T) {
	m, reg := newMetrics(t, prom.Options{Class: byPrefix})
	var fence token.MemoryFence
	storeDown := false
	mw, err := httpmw.New(httpmw.Options{
		Resource: httpmw.PathValue("sku"),
		Fence: fenceFunc(func(ctx context.Context, resource string, t token.Token) error {
			if storeDown {
				return errors.New("store down")
			}
			return fence.Claim(ctx, resource, t)
		}),
		Observe: m.HTTP,
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/sku/{sku}", mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	do := func(method, path string, vals ...string) int {
		r := httptest.NewRequest(method, path, nil)
		if vals != nil {
			r.Header[http.CanonicalHeaderKey(token.Header)] = vals
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w.Code
	}
	const burst = 500
	for i := range burst {
		for _, c := range []struct {
			vals   []string
			status int
		}{
			{[]string{fmt.Sprintf("x%d", i)}, 400},        // malformed
			{[]string{strings.Repeat("1", 21+i%50)}, 400}, // too long
			{[]string{"07"}, 400},                         // leading zero
			{[]string{"5", "6"}, 400},                     // two headers
			{nil, 428},                                    // missing
		} {
			if got := do(http.MethodPut, "/sku/1", c.vals...); got != c.status {
				t.Fatalf("%q: status %d, want %d", c.vals, got, c.status)
			}
		}
	}
	steps := []struct {
		method, path, tok string
		status            int
	}{
		{"PUT", "/sku/1", "10", 200},
		{"PUT", "/sku/1", "9", 409},
		{"PUT", "/sku/1", "18446744073709551615", 403},
		{"PUT", "/sku/%01", "10", 404},
		{"GET", "/sku/1", "", 200},
	}
	for _, s := range steps {
		var vals []string
		if s.tok != "" {
			vals = []string{s.tok}
		}
		if got := do(s.method, s.path, vals...); got != s.status {
			t.Fatalf("%s %s %s: status %d, want %d", s.method, s.path, s.tok, got, s.status)
		}
	}
	storeDown = true
	if got := do("PUT", "/sku/1", "11"); got != 503 {
		t.Fatalf("store down: status %d", got)
	}
	want := fmt.Sprintf(`
# HELP fenceguard_http_requests_total Decisions of the HTTP middleware (Metrics.HTTP as httpmw.Options.Observe): accepted, unfenced (no token, none required), and every refusal — missing (428), invalid (400: malformed, too long, two headers, out of range), no_resource (404), forged (403), stale (409), unavailable (503).
# TYPE fenceguard_http_requests_total counter
fenceguard_http_requests_total{class="none",result="invalid"} %d
fenceguard_http_requests_total{class="none",result="missing"} %d
fenceguard_http_requests_total{class="none",result="no_resource"} 1
fenceguard_http_requests_total{class="none",result="unfenced"} 1
fenceguard_http_requests_total{class="sku",result="accepted"} 1
fenceguard_http_requests_total{class="sku",result="forged"} 1
fenceguard_http_requests_total{class="sku",result="stale"} 1
fenceguard_http_requests_total{class="sku",result="unavailable"} 1
`, 4*burst, burst)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fenceguard_http_requests_total"); err != nil {
		t.Fatal(err)
	}
}

type fenceFunc func(ctx context.Context, resource string, t token.Token) error

func (f fenceFunc) Claim(ctx context.Context, resource string, t token.Token) error {
	return f(ctx, resource, t)
}

// GRPC counts each decision under the class of its key ("none" without
// one) and its result — grpcmw's results, which are httpmw's — and keeps
// both labels bounded whatever strings it is handed: classes past
// MaxClasses count as "other", and so do results no middleware gives.
// HTTP goes through the same bounds.
func TestGRPCCountsEveryDecision(t *testing.T) {
	m, reg := newMetrics(t, prom.Options{Class: byPrefix})
	results := []httpmw.Result{httpmw.ResultAccepted, httpmw.ResultUnfenced, httpmw.ResultMissing, httpmw.ResultInvalid,
		httpmw.ResultNoResource, httpmw.ResultForged, httpmw.ResultStale, httpmw.ResultUnavailable}
	for _, r := range results {
		m.GRPC("sku:1", string(r))
	}
	m.GRPC("", string(httpmw.ResultMissing))
	m.GRPC("", string(httpmw.ResultUnfenced))
	m.GRPC("sku:2", "ACCEPTED")
	m.GRPC("sku:2", "")
	m.GRPC("sku:2", strings.Repeat("x", 1<<10))
	m.HTTP(httptest.NewRequest(http.MethodGet, "/", nil), httpmw.Outcome{Resource: "sku:3", Result: "bogus"})
	want := `
# HELP fenceguard_grpc_calls_total Decisions of grpcmw's server interceptors (Metrics.GRPC from grpcmw.Options.Observe): accepted, unfenced (no token, none required), and every refusal — missing (FAILED_PRECONDITION), invalid (INVALID_ARGUMENT: malformed, two values, binary, out of range), no_resource (INVALID_ARGUMENT), forged (PERMISSION_DENIED), stale (ABORTED), unavailable (UNAVAILABLE).
# TYPE fenceguard_grpc_calls_total counter
fenceguard_grpc_calls_total{class="none",result="missing"} 1
fenceguard_grpc_calls_total{class="none",result="unfenced"} 1
fenceguard_grpc_calls_total{class="sku",result="accepted"} 1
fenceguard_grpc_calls_total{class="sku",result="forged"} 1
fenceguard_grpc_calls_total{class="sku",result="invalid"} 1
fenceguard_grpc_calls_total{class="sku",result="missing"} 1
fenceguard_grpc_calls_total{class="sku",result="no_resource"} 1
fenceguard_grpc_calls_total{class="sku",result="other"} 3
fenceguard_grpc_calls_total{class="sku",result="stale"} 1
fenceguard_grpc_calls_total{class="sku",result="unavailable"} 1
fenceguard_grpc_calls_total{class="sku",result="unfenced"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fenceguard_grpc_calls_total"); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "fenceguard_http_requests_total"); err != nil || n != 1 {
		t.Fatalf("http_requests_total: %d series, %v", n, err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP fenceguard_http_requests_total Decisions of the HTTP middleware (Metrics.HTTP as httpmw.Options.Observe): accepted, unfenced (no token, none required), and every refusal — missing (428), invalid (400: malformed, too long, two headers, out of range), no_resource (404), forged (403), stale (409), unavailable (503).
# TYPE fenceguard_http_requests_total counter
fenceguard_http_requests_total{class="sku",result="other"} 1
`), "fenceguard_http_requests_total"); err != nil {
		t.Fatal(err)
	}

	// Ten thousand distinct keys and result strings, with a Class that
	// returns the key itself: at most MaxClasses classes, "other" and
	// "none", times the eight results and "other".
	m, reg = newMetrics(t, prom.Options{Class: func(k string) string { return k }, MaxClasses: 5})
	for i := range 10_000 {
		m.GRPC(fmt.Sprintf("sku:%d", i), fmt.Sprintf("r%d", i))
		m.GRPC(fmt.Sprintf("sku:%d", i), string(results[i%len(results)]))
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if n := len(mf.GetMetric()); n > (5+2)*(len(results)+1) {
			t.Errorf("%s has %d series", mf.GetName(), n)
		}
	}
}
