package httpmw_test

import (
	"context"
	"encoding/json"
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

// FuzzMiddleware sends arbitrary methods, paths and headers through chi
// and the whole middleware. It must never answer 5xx — except 503 when
// the Fence fails — never panic, never pass a request whose token is not
// exactly the header's, and never move a high-water on a refusal.
func FuzzMiddleware(f *testing.F) {
	const high = 1000 // sku:42's mark before each request
	for _, seed := range []struct {
		method, segment, h1, h2 string
		n                       uint8
		fail                    bool
	}{
		{"PUT", "42", "1000", "", 1, false},
		{"PUT", "42", "999", "", 1, false},
		{"PUT", "42", "1001", "", 1, false},
		{"GET", "42", "", "", 0, false},
		{"POST", "42", "", "", 0, false},
		{"PUT", "42", "1001", "1001", 2, false},
		{"PUT", "%34%32", "2000", "", 1, false},
		{"PUT", "a%00b", "2000", "", 1, false},
		{"PUT", "%FF", "2000", "", 1, false},
		{"HEAD", "42", "18446744073709551615", "", 1, false},
		{"PUT", "42", "18446744073709551616", "", 1, false},
		{"PUT", "42", "00012", "", 1, false},
		{"PUT", "42", "+1", "", 1, false},
		{"PUT", "42", " 1001", "", 1, false},
		{"PUT", "42", "١٢٣", "", 1, false},
		{"PUT", "42", strings.Repeat("9", 30), "", 1, false},
		{"PUT", "42", "1001", "", 1, true},
		{"GET", "42", "", "", 0, true},
	} {
		f.Add(seed.method, seed.segment, seed.h1, seed.h2, seed.n, seed.fail)
	}
	f.Fuzz(func(t *testing.T, method, segment, h1, h2 string, n uint8, fail bool) {
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
		var passed bool
		var gotKey string
		var gotTok token.Token
		h := chiRoute(newMWFuzz(t, fence), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			passed = true
			gotKey, gotTok, _ = token.FromContext(r.Context())
			w.WriteHeader(http.StatusNoContent)
		}))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)

		switch {
		case w.Code == http.StatusServiceUnavailable && fail:
		case w.Code >= 500:
			t.Fatalf("status %d: %s", w.Code, w.Body)
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

func newMWFuzz(t *testing.T, fence token.Fence) *httpmw.Middleware {
	mw, err := httpmw.New(httpmw.Options{Resource: httpmw.ChiParam("sku"), Fence: fence})
	if err != nil {
		t.Fatal(err)
	}
	return mw
}
