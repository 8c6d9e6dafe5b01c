package httpmw_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/token"
)

// TestHTTPHeaderParsing: strict header parsing. Only one spelling per token
// reaches the handler; everything else is refused and moves no mark.
func TestHTTPHeaderParsing(t *testing.T) {
	fence := &token.MemoryFence{Check: token.NoCheck()}
	mw, err := httpmw.New(httpmw.Options{Resource: httpmw.ChiParam("sku"), Fence: fence, Check: token.NoCheck()})
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	r.With(mw.Handler).Put("/sku/{sku}", func(w http.ResponseWriter, r *http.Request) {
		_, tk, _ := token.FromContext(r.Context())
		w.Header().Set("X-Got", tk.String())
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	cases := []struct {
		vals []string
		want int
	}{
		{[]string{"5"}, 200},
		{[]string{" 6 "}, 200}, // net/http trims optional whitespace: still one spelling of 6
		{[]string{"+7"}, 400}, {[]string{"07"}, 400}, {[]string{"7,8"}, 400}, {[]string{"7 8"}, 400},
		{[]string{"0"}, 400}, {[]string{""}, 400}, {[]string{"18446744073709551616"}, 400},
		{[]string{"0x10"}, 400}, {[]string{"1e3"}, 400}, {[]string{"\u0661"}, 400}, {[]string{"9", "9"}, 400},
		{[]string{"18446744073709551615"}, 200},
	}
	ok := 0
	for _, c := range cases {
		req, _ := http.NewRequest("PUT", srv.URL+"/sku/"+"k"+strings.Repeat("x", len(c.vals)), nil)
		req.Header[http.CanonicalHeaderKey(token.Header)] = c.vals
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%q: status %d, want %d", c.vals, resp.StatusCode, c.want)
		} else {
			ok++
		}
	}
	t.Logf("%d of %d header forms answered as expected", ok, len(cases))
}

// TestHTTPTransportKeyMapping: the Transport sends a lease's token only to
// its own resource, whatever spelling of the path or Host the request uses.
func TestHTTPTransportKeyMapping(t *testing.T) {
	got := make(chan string, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Host + " " + r.URL.RequestURI() + " token=" + r.Header.Get(token.Header)
	}))
	defer srv.Close()
	key, err := httpmw.RouteKey("sku", "api.test/sku/{sku}")
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &httpmw.Transport{Key: key}}
	ctx := token.NewContext(context.Background(), "sku:42", 77)
	sent := 0
	for _, tc := range []struct {
		path, host string
		want       bool
	}{
		{"/sku/42", "api.test", true},
		{"/sku/%34%32", "api.test", true},
		{"/sku/43", "api.test", false},
		{"/sku/42", "other.test", false},
		{"/sku/42/", "api.test", false},
		{"/sku/../sku/42", "api.test", false},
		{"//sku/42", "api.test", false},
		{"/sku/42%2F", "api.test", false},
		{"/SKU/42", "api.test", false},
	} {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+tc.path, nil)
		req.Host = tc.host
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		line := <-got
		has := !strings.HasSuffix(line, "token=")
		if has {
			sent++
		}
		if has != tc.want {
			t.Errorf("%s %s: %s (want token %v)", tc.host, tc.path, line, tc.want)
		}
	}
	t.Logf("token sent on %d requests, each to sku:42", sent)
}

// TestHTTPMemlockSequencer: memlock's sequencer through the middleware: a
// forger cannot raise the mark above the holder, not even with another key's
// later token.
func TestHTTPMemlockSequencer(t *testing.T) {
	ctx := context.Background()
	l := memlock.New()
	fence := &token.MemoryFence{}
	mw, _ := httpmw.New(httpmw.Options{Resource: httpmw.PathValue("sku"), Fence: fence,
		Check: token.All(token.ClockBound{}, token.SequencerCheck(l, token.SequencerOptions{}))})
	mux := http.NewServeMux()
	mux.Handle("PUT /sku/{sku}", mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	h, _ := l.Acquire(ctx, "sku:1", time.Second)
	other, _ := l.Acquire(ctx, "sku:2", time.Second)
	put := func(tk token.Token) int {
		req := httptest.NewRequest("PUT", "/sku/1", nil)
		req.Header.Set(token.Header, tk.String())
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, req)
		return w.Code
	}
	if c := put(h.Token()); c != 200 {
		t.Fatalf("holder: %d", c)
	}
	if c := put(other.Token()); c != 403 {
		t.Errorf("sku:2's later token at sku:1: %d, want 403", c)
	}
	if c := put(h.Token() + 1); c != 403 {
		t.Errorf("holder+1: %d", c)
	}
	_ = h.Release(ctx)
	_ = other.Release(ctx)
	n, _ := l.Acquire(ctx, "sku:1", time.Second)
	if c := put(n.Token()); c != 200 {
		t.Errorf("next holder %d: %d", n.Token(), c)
	}
	_ = n.Release(ctx)
	if !errors.Is(fence.Claim(ctx, "sku:1", h.Token()), token.ErrStale) {
		t.Errorf("old holder not stale")
	}
}
