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
	tr := &httpmw.Transport{Base: base}
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
	client := &http.Client{Transport: &httpmw.Transport{Base: srv.Client().Transport}}

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
	_, err := (&httpmw.Transport{Base: base}).RoundTrip(newReq(t, token.NewContext(context.Background(), "sku:42", 17)))
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
		{"stale type, no current", http.StatusConflict, httpmw.ContentType, `{"type":"` + httpmw.TypeStale + `"}`},
		{"stale type, zero current", http.StatusConflict, httpmw.ContentType, `{"type":"` + httpmw.TypeStale + `","current":"0"}`},
		{"not JSON", http.StatusConflict, httpmw.ContentType, `<html>`},
		{"too large", http.StatusConflict, httpmw.ContentType, `{"type":"` + httpmw.TypeStale + `","current":"9","pad":"` + strings.Repeat("x", 70<<10) + `"}`},
		{"missing token", http.StatusPreconditionRequired, httpmw.ContentType, `{"type":"` + httpmw.TypeMissing + `"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := &fakeBase{status: tt.status, ctype: tt.ctype, body: tt.body}
			resp, err := (&httpmw.Transport{Base: base}).RoundTrip(newReq(t, token.NewContext(context.Background(), "sku:42", 17)))
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
