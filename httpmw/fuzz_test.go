package httpmw_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/token"
)

// recordingFence wraps a MemoryFence and remembers which keys were claimed.
type recordingFence struct {
	token.MemoryFence
	claimed []string
	fail    bool
}

func (f *recordingFence) Claim(ctx context.Context, resource string, t token.Token) error {
	f.claimed = append(f.claimed, resource)
	if f.fail {
		return errStoreDown
	}
	return f.MemoryFence.Claim(ctx, resource, t)
}

// The checks the fuzz test runs the middleware with, by its mode argument.
const (
	fuzzDefault = iota // nil: the clock bound (the fence's own check too)
	fuzzNoCheck        // off, in the middleware and the fence
	fuzzFailing        // the check cannot decide: every token refused, 503
	fuzzBound          // a sequencer-like bound: above fuzzBoundAt is forged
	fuzzModes
)

const fuzzBoundAt = 1500

var errCheckDown = errors.New("lock service down")

// FuzzMiddleware sends arbitrary methods, paths and headers through chi
// and the whole middleware. It must never answer 5xx — except 503 when
// the check or the Fence fails — never panic, never pass a request whose
// token is not exactly the header's or is above the check's bound, answer
// 403 only for a token above it, and never move a high-water on a refusal.
func FuzzMiddleware(f *testing.F) {
	const high = 1000 // sku:42's mark before each request
	for _, seed := range []struct {
		method, segment, h1, h2 string
		n                       uint8
		fail                    bool
		mode                    uint8
	}{
		{"PUT", "42", "1000", "", 1, false, fuzzDefault},
		{"PUT", "42", "18446744073709551615", "", 1, false, fuzzDefault},
		{"PUT", "42", "18446744073709551615", "", 1, false, fuzzNoCheck},
		{"PUT", "42", "1001", "", 1, false, fuzzFailing},
		{"PUT", "42", "1501", "", 1, false, fuzzBound},
		{"PUT", "42", "1500", "", 1, false, fuzzBound},
		{"GET", "42", "", "", 0, false, fuzzFailing},
		{"PUT", "42", "999", "", 1, false, fuzzDefault},
		{"PUT", "42", "1001", "", 1, false, fuzzDefault},
		{"GET", "42", "", "", 0, false, fuzzDefault},
		{"POST", "42", "", "", 0, false, fuzzDefault},
		{"PUT", "42", "1001", "1001", 2, false, fuzzDefault},
		{"PUT", "%34%32", "2000", "", 1, false, fuzzDefault},
		{"PUT", "a%00b", "2000", "", 1, false, fuzzDefault},
		{"PUT", "%FF", "2000", "", 1, false, fuzzDefault},
		{"HEAD", "42", "18446744073709551615", "", 1, false, fuzzDefault},
		{"PUT", "42", "18446744073709551616", "", 1, false, fuzzDefault},
		{"PUT", "42", "00012", "", 1, false, fuzzDefault},
		{"PUT", "42", "+1", "", 1, false, fuzzDefault},
		{"PUT", "42", " 1001", "", 1, false, fuzzDefault},
		{"PUT", "42", "١٢٣", "", 1, false, fuzzDefault},
		{"PUT", "42", strings.Repeat("9", 30), "", 1, false, fuzzDefault},
		{"PUT", "42", "1001", "", 1, true, fuzzDefault},
		{"GET", "42", "", "", 0, true, fuzzDefault},
	} {
		f.Add(seed.method, seed.segment, seed.h1, seed.h2, seed.n, seed.fail, seed.mode)
	}
	f.Fuzz(func(t *testing.T, method, segment, h1, h2 string, n uint8, fail bool, mode uint8) {
		mode %= fuzzModes
		req, err := http.NewRequest(method, "http://inventory.test/sku/"+segment, nil)
		if err != nil {
			t.Skip() // not a request a server would parse
		}
		vals := []string{h1, h2}[:min(int(n), 2)]
		if len(vals) > 0 {
			req.Header[http.CanonicalHeaderKey(token.Header)] = vals
		}
		fence := &recordingFence{}
		if err := fence.MemoryFence.Claim(context.Background(), "sku:42", high); err != nil {
			t.Fatal(err)
		}
		fence.fail = fail
		var check token.Check
		bound := func() token.Token { return token.ClockBound{}.Bound() }
		switch mode {
		case fuzzNoCheck:
			check, fence.Check = token.NoCheck(), token.NoCheck()
			bound = func() token.Token { return 1<<64 - 1 }
		case fuzzFailing:
			check = token.CheckFunc(func(context.Context, string, token.Token) error { return errCheckDown })
			bound = func() token.Token { return 0 }
		case fuzzBound:
			check = token.CheckFunc(func(_ context.Context, r string, t token.Token) error {
				if t > fuzzBoundAt {
					return &token.ForgedError{Resource: r, Presented: t, Bound: fuzzBoundAt, By: "sequencer"}
				}
				return nil
			})
			bound = func() token.Token { return fuzzBoundAt }
		}
		var passed bool
		var gotKey string
		var gotTok token.Token
		h := muxRoute(newMWFuzz(t, fence, check), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			passed = true
			gotKey, gotTok, _ = token.FromContext(r.Context())
			w.WriteHeader(http.StatusNoContent)
		}))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)

		switch {
		case w.Code == http.StatusServiceUnavailable && (fail || mode == fuzzFailing):
		case w.Code >= 500:
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		if w.Code == http.StatusForbidden {
			t0, err := token.Parse(vals[0])
			if len(vals) != 1 || err != nil || t0 <= bound() {
				t.Fatalf("403 for header %q, bound %d: %s", vals, bound(), w.Body)
			}
		}
		if w.Code >= 400 && w.Header().Get("Content-Type") == httpmw.ContentType {
			if !json.Valid(w.Body.Bytes()) {
				t.Fatalf("invalid problem body %q", w.Body)
			}
		}
		accepted := passed && gotTok != 0
		if accepted {
			if len(vals) != 1 {
				t.Fatalf("passed with %d header values", len(vals))
			}
			if want, err := token.Parse(vals[0]); err != nil || want != gotTok {
				t.Fatalf("passed token %d for header %q", gotTok, vals[0])
			}
			if fail {
				t.Fatal("passed although the Fence failed")
			}
			if gotTok > bound() {
				t.Fatalf("passed token %d above the check's bound %d", gotTok, bound())
			}
		}
		for _, key := range fence.claimed {
			want := token.Token(0)
			if key == "sku:42" {
				want = high
			}
			if accepted && key == gotKey {
				want = max(want, gotTok)
			}
			if got := fence.HighWater(key); got != want {
				t.Fatalf("high-water of %q is %d, want %d (status %d)", key, got, want, w.Code)
			}
		}
		if !accepted && fence.Len() != 1 {
			t.Fatalf("a refused request left %d keys in the fence", fence.Len())
		}
	})
}

func newMWFuzz(t *testing.T, fence token.Fence, check token.Check) *httpmw.Middleware {
	mw, err := httpmw.New(httpmw.Options{Resource: httpmw.PathValue("sku"), Fence: fence, Check: check})
	if err != nil {
		t.Fatal(err)
	}
	return mw
}
