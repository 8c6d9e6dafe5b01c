// Package httpchi_test runs package httpmw on chi routers: ChiParam's
// unescaping and mounting rules, and RouteKey's agreement with a chi
// server. The core module that holds httpmw does not depend on chi (httpmw
// reads chi's parameters through http.Request.PathValue), so these tests
// live in the integration module, which does.
package httpchi_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/token"
)

func TestMain(m *testing.M) { itest.Main(m) }

// seen is what the wrapped handler found in its request context.
type seen struct {
	calls atomic.Int64
	key   atomic.Pointer[string]
}

func (s *seen) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		if key, _, ok := token.FromContext(r.Context()); ok {
			s.key.Store(&key)
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

// serve sends one request to h with the token tok ("" for none).
func serve(t testing.TB, h http.Handler, method, target, tok string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, target, nil)
	if tok != "" {
		r.Header.Set(token.Header, tok)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// send is the example's client: one request through h, its status and,
// for refusals, the problem type's last word.
func send(h http.Handler, method, target, tok string) string {
	r := httptest.NewRequest(method, target, nil)
	if tok != "" {
		r.Header.Set(token.Header, tok)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code < 400 {
		return fmt.Sprint(w.Code)
	}
	var typ string
	if _, after, ok := strings.Cut(w.Body.String(), `"type":"`); ok {
		typ, _, _ = strings.Cut(after, `"`)
		_, typ, _ = strings.Cut(typ, "#")
	}
	return fmt.Sprint(w.Code, " ", typ)
}
