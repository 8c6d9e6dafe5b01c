// Package httpmw_test runs the HTTP middleware against the real stores it
// fences with — redislock's Fence on redis-server, the PostgreSQL Fence
// and column mode — end to end, and checks its header parsing, the
// Transport's token-to-resource mapping and a sequencer check through it.
// These tests live here, not next to httpmw, because they need the Redis
// and PostgreSQL clients, and the core module that holds httpmw carries
// neither. The middleware over frozen servers is in package frozen.
package httpmw_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/token"
)

func TestMain(m *testing.M) { itest.Main(m) }

// seen is what the wrapped handler found in its request context.
type seen struct {
	calls atomic.Int64
	key   atomic.Pointer[string]
	tok   atomic.Uint64
}

// handler records the token and key the middleware put in the context and
// answers 204.
func (s *seen) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		if key, tok, ok := token.FromContext(r.Context()); ok {
			s.key.Store(&key)
			s.tok.Store(uint64(tok))
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

func newMW(t testing.TB, o httpmw.Options) *httpmw.Middleware {
	t.Helper()
	mw, err := httpmw.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

// chiRoute mounts mw on PUT and GET /sku/{sku}, as an application would.
func chiRoute(mw *httpmw.Middleware, h http.Handler) http.Handler {
	r := chi.NewRouter()
	r.With(mw.Handler).Method(http.MethodPut, "/sku/{sku}", h)
	r.With(mw.Handler).Method(http.MethodGet, "/sku/{sku}", h)
	return r
}

// serve sends one request to h with the given X-Fencing-Token values (none
// at all when vals is nil) and returns the recorded response.
func serve(t testing.TB, h http.Handler, method, target string, vals ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, target, nil)
	if vals != nil {
		r.Header[http.CanonicalHeaderKey(token.Header)] = vals
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// problem is a decoded problem body.
type problem struct {
	Type    string `json:"type"`
	Status  int    `json:"status"`
	Current string `json:"current"`
}

// decodeProblem checks that w holds a problem with status want.
func decodeProblem(t testing.TB, w *httptest.ResponseRecorder, want int) problem {
	t.Helper()
	if w.Code != want {
		t.Fatalf("status %d, want %d; body %s", w.Code, want, w.Body)
	}
	var p problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("body is not JSON: %v: %s", err, w.Body)
	}
	return p
}

// status is the status of a client's answer: the response's, or the
// refusal's the Transport returned as an *httpmw.Problem.
func status(resp *http.Response, err error) (int, error) {
	var p *httpmw.Problem
	if errors.As(err, &p) {
		return p.Status, nil
	}
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func mustRouteKey(name string, patterns ...string) func(*http.Request) (string, bool) {
	k, err := httpmw.RouteKey(name, patterns...)
	if err != nil {
		panic(err)
	}
	return k
}

// maxStore raises m to at least t.
func maxStore(m *atomic.Uint64, t uint64) {
	for {
		cur := m.Load()
		if t <= cur || m.CompareAndSwap(cur, t) {
			return
		}
	}
}

// skuKey is the clients' Transport.Key for the server's /sku/{sku} routes.
var skuKey = mustRouteKey("sku", "/sku/{sku}")

// orderChecker checks, for concurrent requests, that no request is
// accepted with a token below one whose claim had completed before the
// request arrived: the fence orders claims, whatever the interleaving.
type orderChecker struct {
	t    testing.TB
	done []atomic.Uint64 // per key: highest token whose claim completed
}

type arrivalKey struct{}

// wrap returns a handler that notes, before mw, the highest completed
// claim on the request's key, and checks against it inside mw.
func (c *orderChecker) wrap(mw *httpmw.Middleware, inner http.Handler) http.Handler {
	check := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, tok, _ := token.FromContext(r.Context())
		k, _ := strconv.Atoi(chi.URLParam(r, "sku"))
		if before := r.Context().Value(arrivalKey{}).(uint64); uint64(tok) < before {
			c.t.Errorf("sku:%d accepted token %d after a claim of %d had completed", k, tok, before)
		}
		maxStore(&c.done[k], uint64(tok))
		inner.ServeHTTP(w, r)
	})
	r := chi.NewRouter()
	r.With(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			k, _ := strconv.Atoi(chi.URLParam(r, "sku"))
			ctx := context.WithValue(r.Context(), arrivalKey{}, c.done[k].Load())
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}, mw.Handler).Put("/sku/{sku}", check)
	return r
}
