package httpmw_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/token"
)

// Every hostile header is refused with the status of its kind, never
// reaches the handler, and leaves the high-water where it was.
func TestHostileTokens(t *testing.T) {
	const high = 100 // sku:42's high-water before each request
	tests := []struct {
		name   string
		vals   []string // X-Fencing-Token values; nil: no header
		status int
	}{
		// No header on a PUT: the token is required.
		{"missing", nil, http.StatusPreconditionRequired},
		// A header with nothing in it is not a token.
		{"empty", []string{""}, http.StatusBadRequest},
		// Blanks around digits (a raw value; the HTTP/1 reader trims them,
		// proxies and other servers may not).
		{"spaces", []string{" 150 "}, http.StatusBadRequest},
		// A blank inside survives every reader.
		{"inner space", []string{"1 50"}, http.StatusBadRequest},
		// Only blanks.
		{"blanks only", []string{"   "}, http.StatusBadRequest},
		// A plus sign would be a second spelling of 1.
		{"plus", []string{"+1"}, http.StatusBadRequest},
		// No negative tokens.
		{"minus", []string{"-1"}, http.StatusBadRequest},
		// Zero means "no token" and is never issued.
		{"zero", []string{"0"}, http.StatusBadRequest},
		// Leading zeros would be a second spelling of 12.
		{"leading zeros", []string{"00012"}, http.StatusBadRequest},
		// 2^64 does not fit.
		{"2^64", []string{"18446744073709551616"}, http.StatusBadRequest},
		// Thirty digits: too long.
		{"30 digits", []string{strings.Repeat("9", 30)}, http.StatusBadRequest},
		// Arabic-Indic digits are digits to unicode, not to the wire form.
		{"arabic-indic digits", []string{"١٥٠"}, http.StatusBadRequest},
		// Fullwidth digits likewise.
		{"fullwidth digits", []string{"１５０"}, http.StatusBadRequest},
		// Two headers: which one a proxy or log saw is anyone's guess.
		{"two values", []string{"150", "150"}, http.StatusBadRequest},
		// Two headers, the first valid and stale-proof, the second stale.
		{"two values, one stale", []string{"150", "5"}, http.StatusBadRequest},
		// Two tokens folded into one header line.
		{"comma list", []string{"150, 151"}, http.StatusBadRequest},
		// 8 KiB of digits.
		{"8 KiB", []string{strings.Repeat("7", 8<<10)}, http.StatusBadRequest},
		// Hex.
		{"hex", []string{"0x96"}, http.StatusBadRequest},
		// Exponent notation.
		{"exponent", []string{"1e3"}, http.StatusBadRequest},
		// A trailing line break, as a header-injection attempt would leave.
		{"line break", []string{"150\r\nX-Admin: 1"}, http.StatusBadRequest},
		// A NUL byte.
		{"nul", []string{"150\x00"}, http.StatusBadRequest},
		// Invalid UTF-8.
		{"invalid utf-8", []string{"\xff\xfe"}, http.StatusBadRequest},
		// A valid token below the high-water: a paused holder.
		{"stale", []string{"99"}, http.StatusConflict},
		// The smallest token: stale too.
		{"one", []string{"1"}, http.StatusConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var fence token.MemoryFence
			if err := fence.Claim(context.Background(), "sku:42", high); err != nil {
				t.Fatal(err)
			}
			var s seen
			h := chiRoute(newMW(t, httpmw.Options{Resource: httpmw.ChiParam("sku"), Fence: &fence}), s.handler())

			w := serve(t, h, http.MethodPut, "/sku/42", tt.vals...)

			decodeProblem(t, w, tt.status)
			if got := fence.HighWater("sku:42"); got != high {
				t.Errorf("high-water moved: %d, want %d", got, high)
			}
			if fence.Len() != 1 {
				t.Errorf("fence holds %d keys, want 1", fence.Len())
			}
			if s.calls.Load() != 0 {
				t.Error("handler called")
			}
			for _, v := range tt.vals {
				if len(v) >= 4 && strings.Contains(w.Body.String(), v) {
					t.Errorf("body echoes the header: %s", w.Body)
				}
			}
		})
	}
}

// The statuses of the accepted cases, and what the handler gets.
func TestAcceptedTokens(t *testing.T) {
	tests := []struct {
		name   string
		vals   []string
		want   token.Token // high-water afterwards
		status int
	}{
		// Equal to the high-water: the same holder again.
		{"equal", []string{"100"}, 100, http.StatusNoContent},
		// Above: a new holder claims.
		{"above", []string{"101"}, 101, http.StatusNoContent},
		// The largest token there is (no Issued check configured).
		{"max", []string{"18446744073709551615"}, 1<<64 - 1, http.StatusNoContent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var fence token.MemoryFence
			if err := fence.Claim(context.Background(), "sku:42", 100); err != nil {
				t.Fatal(err)
			}
			var s seen
			h := chiRoute(newMW(t, httpmw.Options{Resource: httpmw.ChiParam("sku"), Fence: &fence}), s.handler())
			w := serve(t, h, http.MethodPut, "/sku/42", tt.vals...)
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tt.status, w.Body)
			}
			if got := fence.HighWater("sku:42"); got != tt.want {
				t.Errorf("high-water %d, want %d", got, tt.want)
			}
			if key := s.key.Load(); key == nil || *key != "sku:42" || token.Token(s.tok.Load()) != tt.want {
				t.Errorf("handler context: key %v, token %d; want sku:42, %d", key, s.tok.Load(), tt.want)
			}
		})
	}
}

// Safe methods pass without a token and claim with one; unsafe ones need
// one; Require changes that.
func TestMethods(t *testing.T) {
	tests := []struct {
		name    string
		require func(*http.Request) bool
		method  string
		vals    []string
		status  int
		claimed bool // handler sees a token in its context
	}{
		{"GET without token passes", nil, http.MethodGet, nil, http.StatusNoContent, false},
		{"HEAD without token passes", nil, http.MethodHead, nil, http.StatusNoContent, false},
		{"GET with token claims", nil, http.MethodGet, []string{"7"}, http.StatusNoContent, true},
		{"GET with stale token refused", nil, http.MethodGet, []string{"4"}, http.StatusConflict, false},
		{"GET with bad token refused", nil, http.MethodGet, []string{"07"}, http.StatusBadRequest, false},
		{"POST without token refused", nil, http.MethodPost, nil, http.StatusPreconditionRequired, false},
		{"RequireAll: GET without token refused", httpmw.RequireAll, http.MethodGet, nil, http.StatusPreconditionRequired, false},
		{"custom: POST exempt", func(*http.Request) bool { return false }, http.MethodPost, nil, http.StatusNoContent, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var fence token.MemoryFence
			if err := fence.Claim(context.Background(), "sku:42", 5); err != nil {
				t.Fatal(err)
			}
			var s seen
			mw := newMW(t, httpmw.Options{Resource: httpmw.ChiParam("sku"), Fence: &fence, Require: tt.require})
			w := serve(t, chiRoute(mw, s.handler()), tt.method, "/sku/42", tt.vals...)
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tt.status, w.Body)
			}
			if got := s.key.Load() != nil; got != tt.claimed {
				t.Errorf("token in handler context: %v, want %v", got, tt.claimed)
			}
			want := token.Token(5)
			if tt.claimed {
				want = 7
			}
			if got := fence.HighWater("sku:42"); got != want {
				t.Errorf("high-water %d, want %d", got, want)
			}
		})
	}
}

// A stale refusal says everything a holder needs to heal its locker.
func TestStaleProblem(t *testing.T) {
	var fence token.MemoryFence
	_ = fence.Claim(context.Background(), "sku:42", 1<<60)
	h := chiRoute(newMW(t, httpmw.Options{Resource: httpmw.ChiParam("sku"), Fence: &fence}), new(seen).handler())
	w := serve(t, h, http.MethodPut, "/sku/42", "5")
	p := decodeProblem(t, w, http.StatusConflict)
	want := problem{Type: httpmw.TypeStale, Title: p.Title, Status: 409, Detail: p.Detail,
		Resource: "sku:42", Presented: "5", Current: "1152921504606846976"}
	if p != want {
		t.Errorf("problem %+v\nwant     %+v", p, want)
	}
	for _, h := range []string{"X-Content-Type-Options", "Cache-Control", "Content-Length"} {
		if w.Header().Get(h) == "" {
			t.Errorf("no %s header", h)
		}
	}
}

// Requests that name no valid resource key get 404, and nothing is claimed.
func TestResourceKeys(t *testing.T) {
	tests := []struct {
		name     string
		resource func(*http.Request) (string, error)
		target   string
		status   int
		key      string // claimed key on success
	}{
		// The plain case.
		{"chi param", httpmw.ChiParam("sku"), "/sku/42", http.StatusNoContent, "sku:42"},
		// Escaped digits are the same resource, hence the same key.
		{"escaped digits", httpmw.ChiParam("sku"), "/sku/%34%32", http.StatusNoContent, "sku:42"},
		// An escaped slash is part of the value.
		{"escaped slash", httpmw.ChiParam("sku"), "/sku/a%2Fb", http.StatusNoContent, "sku:a/b"},
		// A literal percent, sent escaped, stays a percent (no double unescaping).
		{"literal percent", httpmw.ChiParam("sku"), "/sku/%2534", http.StatusNoContent, "sku:%34"},
		// Non-ASCII keys are fine.
		{"unicode", httpmw.ChiParam("sku"), "/sku/caf%C3%A9", http.StatusNoContent, "sku:café"},
		// A NUL byte in the path: no store should see it.
		{"nul", httpmw.ChiParam("sku"), "/sku/a%00b", http.StatusNotFound, ""},
		// A line break in the path: no log should see it.
		{"newline", httpmw.ChiParam("sku"), "/sku/a%0Ab", http.StatusNotFound, ""},
		// Invalid UTF-8.
		{"invalid utf-8", httpmw.ChiParam("sku"), "/sku/%FF", http.StatusNotFound, ""},
		// Longer than MaxKeyLen.
		{"too long", httpmw.ChiParam("sku"), "/sku/" + strings.Repeat("x", httpmw.MaxKeyLen), http.StatusNotFound, ""},
		// A misspelt parameter: the route has no {id}.
		{"wrong param", httpmw.ChiParam("id"), "/sku/42", http.StatusNotFound, ""},
		// A Resource func that fails.
		{"resource error", func(*http.Request) (string, error) { return "", errors.New("no tenant") }, "/sku/42", http.StatusNotFound, ""},
		// A Resource func that returns nothing.
		{"empty key", func(*http.Request) (string, error) { return "", nil }, "/sku/42", http.StatusNotFound, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var fence token.MemoryFence
			var s seen
			h := chiRoute(newMW(t, httpmw.Options{Resource: tt.resource, Fence: &fence}), s.handler())
			w := serve(t, h, http.MethodPut, tt.target, "7")
			if tt.status != http.StatusNoContent {
				decodeProblem(t, w, tt.status)
				if fence.Len() != 0 {
					t.Errorf("fence holds %d keys, want 0", fence.Len())
				}
				return
			}
			if w.Code != tt.status {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			if got := fence.HighWater(tt.key); got != 7 {
				t.Errorf("high-water of %q = %d, want 7", tt.key, got)
			}
			if key := s.key.Load(); key == nil || *key != tt.key {
				t.Errorf("handler got key %v, want %q", key, tt.key)
			}
		})
	}
}

// Mounted with Use above the router that matches {sku}, ChiParam cannot
// see the parameter; the middleware must say so rather than guess.
func TestChiParamMountedTooEarly(t *testing.T) {
	var fence token.MemoryFence
	var got *httpmw.Problem
	mw := newMW(t, httpmw.Options{
		Resource: httpmw.ChiParam("sku"), Fence: &fence,
		ErrorWriter: func(w http.ResponseWriter, _ *http.Request, p *httpmw.Problem) {
			got = p
			httpmw.WriteProblem(w, p)
		},
	})
	r := chi.NewRouter()
	r.Use(mw.Handler) // wrong: runs before routing
	r.Put("/sku/{sku}", new(seen).handler().ServeHTTP)
	decodeProblem(t, serve(t, r, http.MethodPut, "/sku/42", "7"), http.StatusNotFound)
	if got == nil || got.Err == nil || !strings.Contains(got.Err.Error(), "mount the middleware on the route") {
		t.Errorf("cause %v does not explain the mounting mistake", got)
	}
	// Inside Route, Use is fine: the parent router has matched {sku}.
	r = chi.NewRouter()
	r.Route("/sku/{sku}", func(r chi.Router) {
		r.Use(mw.Handler)
		r.Put("/", new(seen).handler().ServeHTTP)
	})
	if w := serve(t, r, http.MethodPut, "/sku/42", "7"); w.Code != http.StatusNoContent {
		t.Errorf("inside Route: status %d: %s", w.Code, w.Body)
	}
}

// PathValue works on the standard mux, which unescapes wildcards itself.
func TestPathValueOnServeMux(t *testing.T) {
	var fence token.MemoryFence
	var s seen
	mw := newMW(t, httpmw.Options{Resource: httpmw.PathValue("sku"), Fence: &fence})
	mux := http.NewServeMux()
	mux.Handle("PUT /sku/{sku}", mw.Handler(s.handler()))
	mux.Handle("PUT /other", mw.Handler(s.handler())) // no wildcard: misconfigured
	for _, target := range []string{"/sku/42", "/sku/%34%32"} {
		if w := serve(t, mux, http.MethodPut, target, "7"); w.Code != http.StatusNoContent {
			t.Fatalf("%s: status %d: %s", target, w.Code, w.Body)
		}
	}
	if fence.Len() != 1 || fence.HighWater("sku:42") != 7 {
		t.Errorf("fence: %d keys, sku:42 at %d; want one key at 7", fence.Len(), fence.HighWater("sku:42"))
	}
	if w := serve(t, mux, http.MethodPut, "/sku/%2534", "7"); w.Code != http.StatusNoContent || *s.key.Load() != "sku:%34" {
		t.Errorf("literal percent: status %d, key %q", w.Code, *s.key.Load())
	}
	decodeProblem(t, serve(t, mux, http.MethodPut, "/other", "7"), http.StatusNotFound)
}

// When the Fence cannot answer, the request is refused: 503, fail closed.
// The body does not leak the store's error; the ErrorWriter gets it.
func TestFenceErrorFailsClosed(t *testing.T) {
	var fence failingFence
	var s seen
	var cause error
	mw := newMW(t, httpmw.Options{
		Resource: httpmw.ChiParam("sku"), Fence: &fence,
		ErrorWriter: func(w http.ResponseWriter, _ *http.Request, p *httpmw.Problem) {
			cause = p.Err
			httpmw.WriteProblem(w, p)
		},
	})
	for _, method := range []string{http.MethodPut, http.MethodGet} {
		w := serve(t, chiRoute(mw, s.handler()), method, "/sku/42", "7")
		p := decodeProblem(t, w, http.StatusServiceUnavailable)
		if p.Type != httpmw.TypeUnavailable || strings.Contains(w.Body.String(), "10.0.0.7") {
			t.Errorf("%s: problem %s", method, w.Body)
		}
		if !errors.Is(cause, errStoreDown) {
			t.Errorf("%s: ErrorWriter got cause %v", method, cause)
		}
	}
	if s.calls.Load() != 0 {
		t.Error("handler called")
	}
}

// The ErrorWriter sees every refusal with a cause callers can test.
func TestErrorWriterCauses(t *testing.T) {
	var fence token.MemoryFence
	_ = fence.Claim(context.Background(), "sku:42", 10)
	tests := []struct {
		vals []string
		is   error
	}{
		{nil, token.ErrMissing},
		{[]string{"x"}, token.ErrInvalid},
		{[]string{"1", "2"}, token.ErrInvalid},
		{[]string{"9"}, token.ErrStale},
	}
	for _, tt := range tests {
		var got *httpmw.Problem
		mw := newMW(t, httpmw.Options{
			Resource: httpmw.ChiParam("sku"), Fence: &fence,
			ErrorWriter: func(w http.ResponseWriter, _ *http.Request, p *httpmw.Problem) {
				got = p
				w.WriteHeader(p.Status)
			},
		})
		w := serve(t, chiRoute(mw, new(seen).handler()), http.MethodPut, "/sku/42", tt.vals...)
		if got == nil || !errors.Is(got.Err, tt.is) || w.Code != got.Status {
			t.Errorf("%q: problem %+v, want cause %v", tt.vals, got, tt.is)
		}
	}
}

// The forged-token check refuses tokens above what was issued, before they
// reach the Fence, and fails closed when it cannot ask.
func TestIssued(t *testing.T) {
	const issued = 500
	errLockService := errors.New("lock service down")
	tests := []struct {
		name   string
		issued func(context.Context, string) (token.Token, error)
		vals   []string
		status int
		high   token.Token // afterwards
	}{
		// Issued and newer than the mark: accepted.
		{"issued", bound(issued), []string{"500"}, http.StatusNoContent, 500},
		// One above the last issued token: forged.
		{"forged", bound(issued), []string{"501"}, http.StatusForbidden, 100},
		// The lockout attempt.
		{"max", bound(issued), []string{"18446744073709551615"}, http.StatusForbidden, 100},
		// Nothing issued yet: every token is forged.
		{"none issued", bound(0), []string{"100"}, http.StatusForbidden, 100},
		// The lock service cannot answer: refuse.
		{"unreachable", func(context.Context, string) (token.Token, error) { return 0, errLockService }, []string{"200"}, http.StatusServiceUnavailable, 100},
		// Stale is still stale.
		{"stale", bound(issued), []string{"99"}, http.StatusConflict, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var fence token.MemoryFence
			_ = fence.Claim(context.Background(), "sku:42", 100)
			var keys []string
			mw := newMW(t, httpmw.Options{
				Resource: httpmw.ChiParam("sku"), Fence: &fence,
				Issued: func(ctx context.Context, key string) (token.Token, error) {
					keys = append(keys, key)
					return tt.issued(ctx, key)
				},
			})
			w := serve(t, chiRoute(mw, new(seen).handler()), http.MethodPut, "/sku/42", tt.vals...)
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tt.status, w.Body)
			}
			if got := fence.HighWater("sku:42"); got != tt.high {
				t.Errorf("high-water %d, want %d", got, tt.high)
			}
			if len(keys) != 1 || keys[0] != "sku:42" {
				t.Errorf("Issued asked for %q, want [sku:42]", keys)
			}
			if tt.status == http.StatusForbidden {
				if p := decodeProblem(t, w, tt.status); p.Type != httpmw.TypeForged || p.Current != "" {
					t.Errorf("problem %+v", p)
				}
			}
		})
	}
}

func bound(n token.Token) func(context.Context, string) (token.Token, error) {
	return func(context.Context, string) (token.Token, error) { return n, nil }
}

func TestNewValidates(t *testing.T) {
	resource := httpmw.ChiParam("sku")
	for name, o := range map[string]httpmw.Options{
		"no Resource": {Fence: new(token.MemoryFence)},
		"no Fence":    {Resource: resource},
	} {
		if _, err := httpmw.New(o); !errors.Is(err, httpmw.ErrBadOptions) {
			t.Errorf("%s: err %v, want ErrBadOptions", name, err)
		}
	}
}

// WriteProblem escapes what it writes and keeps a sane status.
func TestWriteProblem(t *testing.T) {
	w := httptest.NewRecorder()
	httpmw.WriteProblem(w, &httpmw.Problem{Type: "t", Title: "x", Status: 0, Detail: "</script>\n\x00"})
	if w.Code != http.StatusInternalServerError {
		t.Errorf("status %d for an invalid Status, want 500", w.Code)
	}
	if b := w.Body.String(); strings.ContainsAny(b, "<>\x00") || strings.Count(b, "\n") != 1 {
		t.Errorf("unescaped body %q", b)
	}
}

// bigintFence stands for a store that holds tokens only up to 2^63−1, as
// PostgreSQL's bigint does, and refuses larger ones as invalid.
type bigintFence struct{ token.MemoryFence }

func (f *bigintFence) Claim(ctx context.Context, resource string, t token.Token) error {
	if t > 1<<63-1 {
		return fmt.Errorf("token %d does not fit a bigint: %w", t, token.ErrInvalid)
	}
	return f.MemoryFence.Claim(ctx, resource, t)
}

// A token the Fence's store cannot hold is bad input (400), not a failure
// of the check (503).
func TestFenceRefusesOutOfRangeToken(t *testing.T) {
	var fence bigintFence
	h := chiRoute(newMW(t, httpmw.Options{Resource: httpmw.ChiParam("sku"), Fence: &fence}), new(seen).handler())
	for _, v := range []string{"9223372036854775808", "18446744073709551615"} {
		if p := decodeProblem(t, serve(t, h, http.MethodPut, "/sku/42", v), http.StatusBadRequest); p.Type != httpmw.TypeInvalid {
			t.Errorf("%s: problem %+v", v, p)
		}
	}
	if w := serve(t, h, http.MethodPut, "/sku/42", "9223372036854775807"); w.Code != http.StatusNoContent {
		t.Errorf("2^63-1: status %d", w.Code)
	}
}

// WriteStale turns a store enforcer's refusal into the middleware's 409,
// and leaves other errors to the handler.
func TestWriteStale(t *testing.T) {
	w := httptest.NewRecorder()
	err := fmt.Errorf("update: %w", &token.StaleError{Resource: "items/42", Presented: 5, Current: 6})
	if !httpmw.WriteStale(w, err) {
		t.Fatal("WriteStale did not write")
	}
	p := decodeProblem(t, w, http.StatusConflict)
	if p.Type != httpmw.TypeStale || p.Resource != "items/42" || p.Presented != "5" || p.Current != "6" {
		t.Errorf("problem %+v", p)
	}
	w = httptest.NewRecorder()
	if httpmw.WriteStale(w, errors.New("connection reset")) || w.Body.Len() != 0 {
		t.Error("WriteStale wrote for another error")
	}
}
