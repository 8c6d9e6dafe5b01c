package httpmw_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/enforce"
)

// harness.Main also fails the package when goroutines leak (goleak).
func TestMain(m *testing.M) { harness.Main(m) }

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

// newMW builds a Middleware or fails the test.
func newMW(t testing.TB, o httpmw.Options) *httpmw.Middleware {
	t.Helper()
	mw, err := httpmw.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

// muxRoute mounts mw on PUT, POST, GET and HEAD /sku/{sku}, as an
// application would.
func muxRoute(mw *httpmw.Middleware, h http.Handler) http.Handler {
	r := newRouter()
	r.With(mw.Handler).Method(http.MethodPut, "/sku/{sku}", h)
	r.With(mw.Handler).Method(http.MethodPost, "/sku/{sku}", h)
	r.With(mw.Handler).Method(http.MethodGet, "/sku/{sku}", h)
	r.With(mw.Handler).Method(http.MethodHead, "/sku/{sku}", h)
	return r
}

// router is the little of a chi-style router the tests need, on
// http.ServeMux: routes with their own middleware.
type router struct{ *http.ServeMux }

func newRouter() *router { return &router{http.NewServeMux()} }

// route is a route under construction with its middleware, outermost
// first.
type route struct {
	r   *router
	mws []func(http.Handler) http.Handler
}

func (r *router) With(mws ...func(http.Handler) http.Handler) route { return route{r, mws} }

func (r *router) Put(pattern string, h http.HandlerFunc) { r.With().Put(pattern, h) }

func (rt route) Method(method, pattern string, h http.Handler) {
	for i := len(rt.mws) - 1; i >= 0; i-- {
		h = rt.mws[i](h)
	}
	rt.r.Handle(method+" "+pattern, h)
}

func (rt route) Put(pattern string, h http.HandlerFunc)  { rt.Method(http.MethodPut, pattern, h) }
func (rt route) Post(pattern string, h http.HandlerFunc) { rt.Method(http.MethodPost, pattern, h) }
func (rt route) Get(pattern string, h http.HandlerFunc)  { rt.Method(http.MethodGet, pattern, h) }

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

// problem is a decoded problem body, tokens as the strings they are sent as.
type problem struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail"`
	Resource  string `json:"resource"`
	Presented string `json:"presented"`
	Current   string `json:"current"`
	Bound     string `json:"bound"`
}

// decodeProblem checks that w holds a well-formed problem with status
// want, and returns it.
func decodeProblem(t testing.TB, w *httptest.ResponseRecorder, want int) problem {
	t.Helper()
	if w.Code != want {
		t.Fatalf("status %d, want %d; body %s", w.Code, want, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != httpmw.ContentType {
		t.Fatalf("Content-Type %q, want %q", ct, httpmw.ContentType)
	}
	var p problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("body is not JSON: %v: %s", err, w.Body)
	}
	if p.Status != want || p.Type == "" || p.Title == "" || p.Detail == "" {
		t.Fatalf("incomplete problem: %+v", p)
	}
	return p
}

// failingFence is a Fence whose store is down.
type failingFence struct{ calls atomic.Int64 }

var errStoreDown = errors.New("dial tcp 10.0.0.7:6379: connection refused")

func (f *failingFence) Claim(ctx context.Context, resource string, t token.Token) error {
	f.calls.Add(1)
	if err := enforce.CheckClaim(resource, t); err != nil {
		return err
	}
	return errStoreDown
}
