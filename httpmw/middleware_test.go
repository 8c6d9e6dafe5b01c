package httpmw_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

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
		// The lockout attempt: the largest token, refused by the default
		// check (far above the clock in µs).
		{"max", []string{"18446744073709551615"}, http.StatusForbidden},
		// 2^62, the token of issue 15's PostgreSQL lockout.
		{"2^62", []string{"4611686018427387904"}, http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var fence token.MemoryFence
			if err := fence.Claim(context.Background(), "sku:42", high); err != nil {
				t.Fatal(err)
			}
			var s seen
			h := muxRoute(newMW(t, httpmw.Options{Resource: httpmw.PathValue("sku"), Fence: &fence}), s.handler())

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
				if _, err := token.Parse(v); err == nil {
					continue // a token is answered in its (canonical) form
				}
				if len(v) >= 4 && strings.Contains(w.Body.String(), v) {
					t.Errorf("body echoes the header: %s", w.Body)
				}
			}
		})
	}
}

// The statuses of the accepted cases, and what the handler gets.
func TestAcceptedTokens(t *testing.T) {
	ahead := token.Token(time.Now().Add(time.Minute).UnixMicro())
	tests := []struct {
		name   string
		check  token.Check // of the middleware and the fence; nil: default
		vals   []string
		want   token.Token // high-water afterwards
		status int
	}{
		// Equal to the high-water: the same holder again.
		{"equal", nil, []string{"100"}, 100, http.StatusNoContent},
		// Above: a new holder claims.
		{"above", nil, []string{"101"}, 101, http.StatusNoContent},
		// A token of the clock-floored lockers, a minute ahead of the
		// resource's clock: within the default skew.
		{"clock-floored", nil, []string{ahead.String()}, ahead, http.StatusNoContent},
		// The largest token there is, with the check turned off.
		{"max, NoCheck", token.NoCheck(), []string{"18446744073709551615"}, 1<<64 - 1, http.StatusNoContent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fence := token.MemoryFence{Check: tt.check}
			if err := fence.Claim(context.Background(), "sku:42", 100); err != nil {
				t.Fatal(err)
			}
			var s seen
			h := muxRoute(newMW(t, httpmw.Options{Resource: httpmw.PathValue("sku"), Fence: &fence, Check: tt.check}), s.handler())
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
			mw := newMW(t, httpmw.Options{Resource: httpmw.PathValue("sku"), Fence: &fence, Require: tt.require})
			w := serve(t, muxRoute(mw, s.handler()), tt.method, "/sku/42", tt.vals...)
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
	fence := token.MemoryFence{Check: token.NoCheck()}
	if err := fence.Claim(context.Background(), "sku:42", 1<<60); err != nil {
		t.Fatal(err)
	}
	h := muxRoute(newMW(t, httpmw.Options{Resource: httpmw.PathValue("sku"), Fence: &fence}), new(seen).handler())
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
		{"path value", httpmw.PathValue("sku"), "/sku/42", http.StatusNoContent, "sku:42"},
		// Escaped digits are the same resource, hence the same key.
		{"escaped digits", httpmw.PathValue("sku"), "/sku/%34%32", http.StatusNoContent, "sku:42"},
		// An escaped slash is part of the value.
		{"escaped slash", httpmw.PathValue("sku"), "/sku/a%2Fb", http.StatusNoContent, "sku:a/b"},
		// A literal percent, sent escaped, stays a percent (no double unescaping).
		{"literal percent", httpmw.PathValue("sku"), "/sku/%2534", http.StatusNoContent, "sku:%34"},
		// Non-ASCII keys are fine.
		{"unicode", httpmw.PathValue("sku"), "/sku/caf%C3%A9", http.StatusNoContent, "sku:café"},
		// A NUL byte in the path: no store should see it.
		{"nul", httpmw.PathValue("sku"), "/sku/a%00b", http.StatusNotFound, ""},
		// A line break in the path: no log should see it.
		{"newline", httpmw.PathValue("sku"), "/sku/a%0Ab", http.StatusNotFound, ""},
		// Invalid UTF-8.
		{"invalid utf-8", httpmw.PathValue("sku"), "/sku/%FF", http.StatusNotFound, ""},
		// Longer than 512 bytes, the longest key the middleware accepts.
		{"too long", httpmw.PathValue("sku"), "/sku/" + strings.Repeat("x", 512), http.StatusNotFound, ""},
		// A misspelt parameter: the route has no {id}.
		{"wrong param", httpmw.PathValue("id"), "/sku/42", http.StatusNotFound, ""},
		// A Resource func that fails.
		{"resource error", func(*http.Request) (string, error) { return "", errors.New("no tenant") }, "/sku/42", http.StatusNotFound, ""},
		// A Resource func that returns nothing.
		{"empty key", func(*http.Request) (string, error) { return "", nil }, "/sku/42", http.StatusNotFound, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var fence token.MemoryFence
			var s seen
			h := muxRoute(newMW(t, httpmw.Options{Resource: tt.resource, Fence: &fence}), s.handler())
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
		Resource: httpmw.PathValue("sku"), Fence: &fence,
		ErrorWriter: func(w http.ResponseWriter, _ *http.Request, p *httpmw.Problem) {
			cause = p.Err
			httpmw.WriteProblem(w, p)
		},
	})
	for _, method := range []string{http.MethodPut, http.MethodGet} {
		w := serve(t, muxRoute(mw, s.handler()), method, "/sku/42", "7")
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
		{[]string{"18446744073709551615"}, token.ErrForged},
	}
	for _, tt := range tests {
		var got *httpmw.Problem
		mw := newMW(t, httpmw.Options{
			Resource: httpmw.PathValue("sku"), Fence: &fence,
			ErrorWriter: func(w http.ResponseWriter, _ *http.Request, p *httpmw.Problem) {
				got = p
				w.WriteHeader(p.Status)
			},
		})
		w := serve(t, muxRoute(mw, new(seen).handler()), http.MethodPut, "/sku/42", tt.vals...)
		if got == nil || !errors.Is(got.Err, tt.is) || w.Code != got.Status {
			t.Errorf("%q: problem %+v, want cause %v", tt.vals, got, tt.is)
		}
	}
}

// Options.Check runs before the claim: a forged token is refused with
// 403 and the check's bound, a check that cannot decide refuses with 503,
// and in neither case does the mark move or the Fence see the request.
func TestCheck(t *testing.T) {
	errLockService := errors.New("dial tcp 10.0.0.9:2379: lock service down")
	// bound stands for a sequencer check whose current holder has 500.
	bound := token.CheckFunc(func(_ context.Context, resource string, t token.Token) error {
		if t > 500 {
			return &token.ForgedError{Resource: resource, Presented: t, Bound: 500, By: "sequencer"}
		}
		return nil
	})
	clock := token.ClockBound{Now: func() time.Time { return time.UnixMicro(1_000_000) }} // bound: 1s + 5 min
	const clockBound = "301000000"
	tests := []struct {
		name   string
		check  token.Check
		vals   string
		status int
		high   token.Token // afterwards
		bound  string      // in the 403's body
	}{
		// At the bound: the current holder. Accepted, and it claims.
		{"at the bound", bound, "500", http.StatusNoContent, 500, ""},
		// One above the current holder's token: not granted yet.
		{"above the bound", bound, "501", http.StatusForbidden, 100, "500"},
		// The lockout attempt.
		{"max", bound, "18446744073709551615", http.StatusForbidden, 100, "500"},
		// Stale is still stale: the check bounds from above only.
		{"stale", bound, "99", http.StatusConflict, 100, ""},
		// The clock bound: the resource's clock in µs plus the skew.
		{"clock: at", clock, clockBound, http.StatusNoContent, 301_000_000, ""},
		{"clock: above", clock, "301000001", http.StatusForbidden, 100, clockBound},
		// A check that refuses with ErrForged but no ForgedError: 403, no bound.
		{"bare ErrForged", token.CheckFunc(func(context.Context, string, token.Token) error {
			return fmt.Errorf("made up: %w", token.ErrForged)
		}), "200", http.StatusForbidden, 100, ""},
		// The lock service cannot answer: not knowing is refusing.
		{"unreachable", token.CheckFunc(func(context.Context, string, token.Token) error { return errLockService }),
			"200", http.StatusServiceUnavailable, 100, ""},
		// NoCheck: everything above the mark claims, the lockout too.
		{"NoCheck", token.NoCheck(), "18446744073709551615", http.StatusNoContent, 1<<64 - 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fence := &recordingFence{MemoryFence: token.MemoryFence{Check: token.NoCheck()}}
			_ = fence.MemoryFence.Claim(context.Background(), "sku:42", 100)
			var asked []string
			var cause error
			mw := newMW(t, httpmw.Options{
				Resource: httpmw.PathValue("sku"), Fence: fence,
				Check: token.CheckFunc(func(ctx context.Context, key string, t token.Token) error {
					asked = append(asked, fmt.Sprint(key, "=", t))
					return tt.check.Check(ctx, key, t)
				}),
				ErrorWriter: func(w http.ResponseWriter, _ *http.Request, p *httpmw.Problem) {
					cause = p.Err
					httpmw.WriteProblem(w, p)
				},
			})
			w := serve(t, muxRoute(mw, new(seen).handler()), http.MethodPut, "/sku/42", tt.vals)
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tt.status, w.Body)
			}
			if got := fence.HighWater("sku:42"); got != tt.high {
				t.Errorf("high-water %d, want %d", got, tt.high)
			}
			if want := "sku:42=" + tt.vals; len(asked) != 1 || asked[0] != want {
				t.Errorf("check asked %q, want [%s]", asked, want)
			}
			switch tt.status {
			case http.StatusForbidden, http.StatusServiceUnavailable:
				if len(fence.claimed) != 0 {
					t.Errorf("the Fence saw a refused token: %q", fence.claimed)
				}
			}
			switch tt.status {
			case http.StatusForbidden:
				p := decodeProblem(t, w, tt.status)
				want := problem{Type: httpmw.TypeForged, Title: p.Title, Status: 403, Detail: p.Detail,
					Presented: tt.vals, Bound: tt.bound}
				if p != want {
					t.Errorf("problem %+v\nwant     %+v", p, want)
				}
				if strings.Contains(w.Body.String(), "/sku") || strings.Contains(w.Body.String(), "42\"") {
					t.Errorf("body echoes the path: %s", w.Body)
				}
				if !errors.Is(cause, token.ErrForged) {
					t.Errorf("cause %v, want ErrForged", cause)
				}
			case http.StatusServiceUnavailable:
				if p := decodeProblem(t, w, tt.status); p.Type != httpmw.TypeUnavailable || strings.Contains(w.Body.String(), "10.0.0.9") {
					t.Errorf("problem %s", w.Body)
				}
				if !errors.Is(cause, errLockService) {
					t.Errorf("cause %v, want the lock service's error", cause)
				}
			}
		})
	}
}

// With no Check, the default clock bound refuses made-up tokens far above
// the clock — issue 15's 2^62 lockout — with 403, before the Fence.
func TestDefaultCheck(t *testing.T) {
	fence := &recordingFence{MemoryFence: token.MemoryFence{Check: token.NoCheck()}}
	_ = fence.MemoryFence.Claim(context.Background(), "sku:42", 100)
	h := muxRoute(newMW(t, httpmw.Options{Resource: httpmw.PathValue("sku"), Fence: fence}), new(seen).handler())
	before := token.ClockBound{}.Bound()
	for _, v := range []string{"4611686018427387904", "18446744073709551615", (before + token.Token(time.Minute.Microseconds())).String()} {
		p := decodeProblem(t, serve(t, h, http.MethodPut, "/sku/42", v), http.StatusForbidden)
		b, err := token.Parse(p.Bound)
		if p.Type != httpmw.TypeForged || err != nil || b < before || b > (token.ClockBound{}).Bound() {
			t.Errorf("%s: problem %+v, want forged with the clock bound", v, p)
		}
	}
	if len(fence.claimed) != 0 || fence.HighWater("sku:42") != 100 {
		t.Errorf("the Fence saw %q; high-water %d, want 100", fence.claimed, fence.HighWater("sku:42"))
	}
	if w := serve(t, h, http.MethodPut, "/sku/42", token.Token(time.Now().UnixMicro()).String()); w.Code != http.StatusNoContent {
		t.Errorf("a token at the clock: status %d: %s", w.Code, w.Body)
	}
}

// The check runs before SerializePerKey's wait: a forger gets its 403 at
// once even while an honest request holds the key, and never queues for
// it. (Checked after the wait, a forger's request would wait behind the
// holder — here it has no time to: its context has already ended, which
// would have answered 503.)
func TestCheckBeforeSerializeWait(t *testing.T) {
	var fence token.MemoryFence
	var mw *httpmw.Middleware
	var queuedAtCheck []int
	mw = newMW(t, httpmw.Options{
		Resource: httpmw.PathValue("sku"), Fence: &fence, SerializePerKey: true,
		Check: token.CheckFunc(func(ctx context.Context, key string, t token.Token) error {
			queuedAtCheck = append(queuedAtCheck, httpmw.LockedKeys(mw))
			return token.DefaultCheck().Check(ctx, key, t)
		}),
	})
	entered, release := make(chan struct{}), make(chan struct{})
	r := newRouter()
	r.With(mw.Handler).Put("/sku/{sku}", func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
	})
	done := make(chan int)
	go func() { done <- serve(t, r, http.MethodPut, "/sku/1", "5").Code }()
	<-entered // the holder has the key

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPut, "/sku/1", nil)
	req.Header.Set(token.Header, "18446744073709551615")
	w := httptest.NewRecorder()
	r.ServeHTTP(w, req)
	if p := decodeProblem(t, w, http.StatusForbidden); p.Type != httpmw.TypeForged {
		t.Errorf("forger: problem %+v", p)
	}
	close(release)
	if code := <-done; code != http.StatusOK {
		t.Errorf("holder: status %d", code)
	}
	if want := []int{0, 1}; !slices.Equal(queuedAtCheck, want) {
		t.Errorf("keys in the serialization table at each check: %v, want %v (checked before queuing)", queuedAtCheck, want)
	}
	if hw := fence.HighWater("sku:1"); hw != 5 {
		t.Errorf("high-water %d, want 5", hw)
	}
}

// A Fence that runs a check of its own answers a forged token with the
// same 403, even with the middleware's check off.
func TestFenceForgedRefusal(t *testing.T) {
	fence := token.MemoryFence{Check: token.CheckFunc(func(_ context.Context, r string, t token.Token) error {
		if t > 50 {
			return &token.ForgedError{Resource: r, Presented: t, Bound: 50, By: "sequencer"}
		}
		return nil
	})}
	h := muxRoute(newMW(t, httpmw.Options{Resource: httpmw.PathValue("sku"), Fence: &fence, Check: token.NoCheck()}), new(seen).handler())
	p := decodeProblem(t, serve(t, h, http.MethodPut, "/sku/42", "51"), http.StatusForbidden)
	if p.Type != httpmw.TypeForged || p.Presented != "51" || p.Bound != "50" {
		t.Errorf("problem %+v", p)
	}
	if fence.Len() != 0 {
		t.Errorf("fence holds %d keys", fence.Len())
	}
}

func TestNewValidates(t *testing.T) {
	resource := httpmw.PathValue("sku")
	for name, o := range map[string]httpmw.Options{
		"no Resource": {Fence: new(token.MemoryFence)},
		"no Fence":    {Resource: resource},
	} {
		if _, err := httpmw.New(o); err == nil {
			t.Errorf("%s: New accepted the options", name)
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
// PostgreSQL's bigint does, and refuses larger ones as invalid, or, with
// rangeErr, with a *token.RangeError.
type bigintFence struct {
	token.MemoryFence
	rangeErr bool
}

func (f *bigintFence) Claim(ctx context.Context, resource string, t token.Token) error {
	if t > token.MaxInt64 {
		if f.rangeErr {
			return &token.RangeError{What: "PostgreSQL bigint", Token: t, Max: token.MaxInt64}
		}
		return fmt.Errorf("token %d does not fit a bigint: %w", t, token.ErrInvalid)
	}
	return f.MemoryFence.Claim(ctx, resource, t)
}

// A token the Fence's store cannot hold is bad input (400), not a failure
// of the check (503).
func TestFenceRefusesOutOfRangeToken(t *testing.T) {
	for _, rangeErr := range []bool{false, true} {
		fence := &bigintFence{MemoryFence: token.MemoryFence{Check: token.NoCheck()}, rangeErr: rangeErr}
		h := muxRoute(newMW(t, httpmw.Options{Resource: httpmw.PathValue("sku"), Fence: fence, Check: token.NoCheck()}), new(seen).handler())
		for _, v := range []string{"9223372036854775808", "18446744073709551615"} {
			if p := decodeProblem(t, serve(t, h, http.MethodPut, "/sku/42", v), http.StatusBadRequest); p.Type != httpmw.TypeInvalid {
				t.Errorf("RangeError %v, %s: problem %+v", rangeErr, v, p)
			}
		}
		if w := serve(t, h, http.MethodPut, "/sku/42", "9223372036854775807"); w.Code != http.StatusNoContent {
			t.Errorf("RangeError %v, 2^63-1: status %d", rangeErr, w.Code)
		}
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
