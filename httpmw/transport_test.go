package httpmw_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/token"
)

// fakeBase is a RoundTripper that records the request it was given and
// answers with a canned response whose body records being closed.
type fakeBase struct {
	got    *http.Request
	status int
	ctype  string
	body   string
	closed atomic.Bool
}

func (f *fakeBase) RoundTrip(req *http.Request) (*http.Response, error) {
	f.got = req
	h := make(http.Header)
	if f.ctype != "" {
		h.Set("Content-Type", f.ctype)
	}
	return &http.Response{
		StatusCode: f.status, Header: h, Request: req,
		Body: &closeRecorder{Reader: strings.NewReader(f.body), closed: &f.closed},
	}, nil
}

type closeRecorder struct {
	io.Reader
	closed *atomic.Bool
}

func (c *closeRecorder) Close() error { c.closed.Store(true); return nil }

// skuKey is the clients' Transport.Key for the server's /sku/{sku} routes.
var skuKey = mustRouteKey("sku", "/sku/{sku}")

func mustRouteKey(name string, patterns ...string) func(*http.Request) (string, bool) {
	k, err := httpmw.RouteKey(name, patterns...)
	if err != nil {
		panic(err)
	}
	return k
}

func newReq(t *testing.T, ctx context.Context) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://inventory.test/sku/42", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func TestTransportSetsHeaderFromContext(t *testing.T) {
	base := &fakeBase{status: http.StatusNoContent}
	tr := &httpmw.Transport{Base: base, Key: skuKey}
	req := newReq(t, token.NewContext(context.Background(), "sku:42", 1717))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := base.got.Header.Values(token.Header); len(got) != 1 || got[0] != "1717" {
		t.Errorf("sent %s %q, want [1717]", token.Header, got)
	}
	if base.got == req {
		t.Error("the caller's request was sent, not a clone")
	}
	if _, ok := req.Header[token.Header]; ok {
		t.Error("the caller's request was modified")
	}
}

func TestTransportWithoutTokenSendsNone(t *testing.T) {
	base := &fakeBase{status: http.StatusNoContent}
	req := newReq(t, context.Background())
	resp, err := (&httpmw.Transport{Base: base}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, ok := base.got.Header[token.Header]; ok {
		t.Errorf("sent a %s header without a token in the context", token.Header)
	}
	if base.got != req {
		t.Error("a request without a token was cloned for nothing")
	}
}

// A header the caller set explicitly is sent as it is.
func TestTransportKeepsExplicitHeader(t *testing.T) {
	base := &fakeBase{status: http.StatusNoContent}
	req := newReq(t, token.NewContext(context.Background(), "sku:42", 1717))
	req.Header.Set(token.Header, "99")
	resp, err := (&httpmw.Transport{Base: base}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := base.got.Header.Values(token.Header); len(got) != 1 || got[0] != "99" {
		t.Errorf("sent %q, want [99]", got)
	}
}

// The middleware's 409 becomes a *token.StaleError, which survives
// http.Client's *url.Error wrapping; the body is closed.
func TestTransportStaleThroughClient(t *testing.T) {
	var fence token.MemoryFence
	_ = fence.Claim(context.Background(), "sku:42", 1800)
	mw := newMW(t, httpmw.Options{Resource: httpmw.PathValue("sku"), Fence: &fence})
	mux := http.NewServeMux()
	mux.Handle("PUT /sku/{sku}", mw.Handler(new(seen).handler()))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := &http.Client{Transport: &httpmw.Transport{Base: srv.Client().Transport, Key: skuKey}}

	put := func(t token.Token) (*http.Response, error) {
		ctx := token.NewContext(context.Background(), "sku:42", t)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL+"/sku/42", nil)
		return client.Do(req)
	}
	resp, err := put(1717)
	if resp != nil {
		resp.Body.Close()
	}
	var stale *token.StaleError
	if !errors.As(err, &stale) {
		t.Fatalf("err %v (%T), want a *token.StaleError", err, err)
	}
	want := token.StaleError{Resource: "sku:42", Presented: 1717, Current: 1800}
	if *stale != want {
		t.Errorf("StaleError %+v, want %+v", *stale, want)
	}
	var uerr *url.Error
	if !errors.As(err, &uerr) || !errors.Is(err, token.ErrStale) {
		t.Errorf("err %v: want a *url.Error wrapping token.ErrStale", err)
	}

	resp, err = put(1800)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("status %d, want 204", resp.StatusCode)
	}
}

func TestTransportClosesStaleBody(t *testing.T) {
	base := &fakeBase{status: http.StatusConflict, ctype: httpmw.ContentType + "; charset=utf-8",
		body: `{"type":"` + httpmw.TypeStale + `","status":409,"resource":"sku:42","current":18}`}
	_, err := (&httpmw.Transport{Base: base, Key: skuKey}).RoundTrip(newReq(t, token.NewContext(context.Background(), "sku:42", 17)))
	var stale *token.StaleError
	if !errors.As(err, &stale) || stale.Current != 18 || stale.Presented != 17 {
		t.Fatalf("err %v; want stale 17 < 18 (a numeric current, presented from the request)", err)
	}
	if !base.closed.Load() {
		t.Error("body not closed")
	}
}

// Every other response comes back untouched, body and all.
func TestTransportLeavesOtherResponses(t *testing.T) {
	other := `{"type":"https://example.test/out-of-stock","title":"Out of stock","status":409}`
	tests := []struct {
		name   string
		status int
		ctype  string
		body   string
	}{
		{"ok", http.StatusOK, "application/json", `{"units":3}`},
		{"application 409", http.StatusConflict, "application/json", `{"error":"conflict"}`},
		{"other problem type", http.StatusConflict, httpmw.ContentType, other},
		{"stale, current not above the token", http.StatusConflict, httpmw.ContentType, `{"type":"` + httpmw.TypeStale + `","current":"17"}`},
		{"stale, another token presented", http.StatusConflict, httpmw.ContentType, `{"type":"` + httpmw.TypeStale + `","presented":"999","current":"20"}`},
		{"stale, a resource no server echoes", http.StatusConflict, httpmw.ContentType, `{"type":"` + httpmw.TypeStale + `","resource":"sku:42\u202e","current":"20"}`},
		{"forged, bound not below the token", http.StatusForbidden, httpmw.ContentType, `{"type":"` + httpmw.TypeForged + `","bound":"17"}`},
		{"type in another case", http.StatusConflict, httpmw.ContentType, `{"TYPE":"` + httpmw.TypeCondition + `"}`},
		{"stale type, zero current", http.StatusConflict, httpmw.ContentType, `{"type":"` + httpmw.TypeStale + `","current":"0"}`},
		{"not JSON", http.StatusConflict, httpmw.ContentType, `<html>`},
		{"too large", http.StatusConflict, httpmw.ContentType, `{"type":"` + httpmw.TypeStale + `","current":"9","pad":"` + strings.Repeat("x", 70<<10) + `"}`},
		{"unknown type under the package's base", http.StatusConflict, httpmw.ContentType, `{"type":"` + strings.TrimSuffix(httpmw.TypeStale, "stale-token") + `other"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := &fakeBase{status: tt.status, ctype: tt.ctype, body: tt.body}
			resp, err := (&httpmw.Transport{Base: base, Key: skuKey}).RoundTrip(newReq(t, token.NewContext(context.Background(), "sku:42", 17)))
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			if err != nil || string(b) != tt.body || resp.StatusCode != tt.status {
				t.Errorf("status %d, body %.80q (%v); want %d and the body as sent", resp.StatusCode, b, err, tt.status)
			}
			if err := resp.Body.Close(); err != nil || !base.closed.Load() {
				t.Errorf("Close: %v; base body closed: %v", err, base.closed.Load())
			}
		})
	}
}

func TestTransportPassesTransportErrors(t *testing.T) {
	boom := errors.New("connection reset")
	tr := &httpmw.Transport{Base: roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, boom })}
	if _, err := tr.RoundTrip(newReq(t, context.Background())); !errors.Is(err, boom) {
		t.Errorf("err %v, want %v", err, boom)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A stale refusal of a request whose header the caller set names that
// token when the body does not.
func TestTransportStaleWithExplicitHeader(t *testing.T) {
	base := &fakeBase{status: http.StatusConflict, ctype: httpmw.ContentType,
		body: `{"type":"` + httpmw.TypeStale + `","current":"18"}`}
	req := newReq(t, context.Background())
	req.Header.Set(token.Header, "17")
	_, err := (&httpmw.Transport{Base: base}).RoundTrip(req)
	var stale *token.StaleError
	if !errors.As(err, &stale) || stale.Presented != 17 || stale.Current != 18 {
		t.Fatalf("err %v, want stale 17 < 18", err)
	}
}

// A 409 stale-token problem to a request that carried no token is not a
// refusal of one: it comes back as a response.
func TestTransportStaleBodyWithoutToken(t *testing.T) {
	body := `{"type":"` + httpmw.TypeStale + `","current":"18"}`
	base := &fakeBase{status: http.StatusConflict, ctype: httpmw.ContentType, body: body}
	resp, err := (&httpmw.Transport{Base: base, Key: skuKey}).RoundTrip(newReq(t, context.Background()))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || string(b) != body {
		t.Errorf("status %d, body %q", resp.StatusCode, b)
	}
}

// The token goes only to the resource it was granted for: a request the
// Key maps to another key, or to none, goes without it, as a plain
// request, uncloned.
func TestTransportOtherResourceGetsNoToken(t *testing.T) {
	for _, tt := range []struct {
		name   string
		target string
	}{
		{"another sku", "http://inventory.test/sku/43"},
		{"a spelling of another sku", "http://inventory.test/sku/%34%33"},
		{"an unfenced path", "http://inventory.test/healthz"},
		{"below the route", "http://inventory.test/sku/42/history"},
		{"a path the server would redirect", "http://inventory.test/sku//42"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			base := &fakeBase{status: http.StatusNoContent}
			req, _ := http.NewRequestWithContext(token.NewContext(context.Background(), "sku:42", 1717), http.MethodGet, tt.target, nil)
			resp, err := (&httpmw.Transport{Base: base, Key: skuKey}).RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if v, ok := base.got.Header[http.CanonicalHeaderKey(token.Header)]; ok {
				t.Errorf("sent %s %q to %s", token.Header, v, tt.target)
			}
			if base.got != req {
				t.Error("a request without a token was cloned for nothing")
			}
		})
	}
	// The same spelling trick the other way: %34%32 is sku:42 and gets it.
	base := &fakeBase{status: http.StatusNoContent}
	req, _ := http.NewRequestWithContext(token.NewContext(context.Background(), "sku:42", 1717), http.MethodGet, "http://inventory.test/sku/%34%32", nil)
	resp, err := (&httpmw.Transport{Base: base, Key: skuKey}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := base.got.Header.Values(token.Header); len(got) != 1 || got[0] != "1717" {
		t.Errorf("/sku/%%34%%32 sent %q, want [1717]", got)
	}
}

// With no Key, a request whose context carries a token is refused, not
// sent: the Transport cannot tell whether the token is for it. The body
// is closed, as RoundTrip must. Requests without a token, or with their
// own header, are sent as before.
func TestTransportWithoutKeyRefusesTokens(t *testing.T) {
	var called atomic.Int64
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		called.Add(1)
		return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody, Request: r}, nil
	})
	client := &http.Client{Transport: &httpmw.Transport{Base: base}}
	var closed atomic.Bool
	body := &closeRecorder{Reader: strings.NewReader("{}"), closed: &closed}
	req, _ := http.NewRequestWithContext(token.NewContext(context.Background(), "sku:42", 1717), http.MethodPut, "http://inventory.test/sku/42", body)
	resp, err := client.Do(req)
	if resp != nil {
		resp.Body.Close()
	}
	var uerr *url.Error
	if !errors.Is(err, httpmw.ErrNoKey) || !errors.As(err, &uerr) || !strings.Contains(err.Error(), `"sku:42"`) {
		t.Errorf("err %v, want a *url.Error wrapping ErrNoKey that names the key", err)
	}
	if called.Load() != 0 {
		t.Error("the request was sent")
	}
	if !closed.Load() {
		t.Error("the request body was not closed")
	}

	for name, req := range map[string]*http.Request{
		"no token": newReq(t, context.Background()),
		"own header": func() *http.Request {
			r := newReq(t, token.NewContext(context.Background(), "sku:42", 1717))
			r.Header.Set(token.Header, "9")
			return r
		}(),
		"zero token ctx": newReq(t, token.NewContext(context.Background(), "sku:42", 0)),
	} {
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		resp.Body.Close()
	}
	if called.Load() != 3 {
		t.Errorf("%d requests sent, want 3", called.Load())
	}
}

// Issue 15's scenario end to end: B holds sku:42 and, inside its critical
// section, reads /sku/43 with a plain GET; A is the honest holder of
// sku:43 with a lower token. B's token must not reach sku:43, so A is not
// refused afterwards — and B's own resource still gets B's token.
func TestTransportTokenOnlyToItsResourceEndToEnd(t *testing.T) {
	var fence token.MemoryFence
	mw := newMW(t, httpmw.Options{Resource: httpmw.PathValue("sku"), Fence: &fence})
	var s seen
	mux := http.NewServeMux()
	mux.Handle("/sku/{sku}", mw.Handler(s.handler()))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := &http.Client{Transport: &httpmw.Transport{Base: srv.Client().Transport, Key: skuKey}}
	do := func(ctx context.Context, method, path string) (int, error) {
		req, _ := http.NewRequestWithContext(ctx, method, srv.URL+path, nil)
		resp, err := client.Do(req)
		var p *httpmw.Problem
		if errors.As(err, &p) { // a refusal
			return p.Status, nil
		}
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	bg := context.Background()
	a := token.NewContext(bg, "sku:43", 1000) // A, the holder of sku:43
	b := token.NewContext(bg, "sku:42", 2000) // B, a later grant of another key

	if code, err := do(a, http.MethodPut, "/sku/43"); err != nil || code != http.StatusNoContent {
		t.Fatalf("A's first write: %d, %v", code, err)
	}
	if code, err := do(b, http.MethodGet, "/sku/43"); err != nil || code != http.StatusNoContent {
		t.Fatalf("B's plain GET of sku:43: %d, %v", code, err)
	}
	if key := s.key.Load(); key == nil || *key != "sku:43" || s.tok.Load() != 1000 {
		t.Fatalf("handler context %v/%d: B's GET must have passed unfenced", key, s.tok.Load())
	}
	// A PUT there without a token is what a fenced route refuses.
	if code, err := do(b, http.MethodPut, "/sku/43"); err != nil || code != http.StatusPreconditionRequired {
		t.Errorf("B's PUT of sku:43: %d, %v; want 428 (sent without a token)", code, err)
	}
	if hw := fence.HighWater("sku:43"); hw != 1000 {
		t.Errorf("sku:43's mark %d, want A's 1000: B's token claimed A's resource", hw)
	}
	if code, err := do(a, http.MethodPut, "/sku/43"); err != nil || code != http.StatusNoContent {
		t.Errorf("A after B's GET: %d, %v; want 204 (A must not be refused)", code, err)
	}
	if code, err := do(b, http.MethodPut, "/sku/42"); err != nil || code != http.StatusNoContent || fence.HighWater("sku:42") != 2000 {
		t.Errorf("B's own write: %d, %v, sku:42 at %d; want 204 at 2000", code, err, fence.HighWater("sku:42"))
	}
}

// In a critical section over several keys each request carries the token
// of the key it maps to, and a key not held gets none.
func TestTransportSendsEachHeldKeysToken(t *testing.T) {
	ctx := token.NewContext(token.NewContext(context.Background(), "sku:42", 1717), "sku:43", 1800)
	for target, want := range map[string]string{
		"http://inventory.test/sku/42": "1717",
		"http://inventory.test/sku/43": "1800",
		"http://inventory.test/sku/44": "",
	} {
		base := &fakeBase{status: http.StatusNoContent}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, target, nil)
		resp, err := (&httpmw.Transport{Base: base, Key: skuKey}).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := base.got.Header.Get(token.Header); got != want {
			t.Errorf("%s sent token %q, want %q", target, got, want)
		}
	}
}
