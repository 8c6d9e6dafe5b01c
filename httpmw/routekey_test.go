package httpmw_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/token"
)

func TestRouteKey(t *testing.T) {
	anyHost := mustRouteKey("sku", "/sku/{sku}")
	oneHost := mustRouteKey("sku", "inventory.test/sku/{sku}")
	putOnly := mustRouteKey("sku", "PUT /sku/{sku}")
	twoRoutes := mustRouteKey("sku", "/items/{sku}", "/items/{sku}/stock")
	rest := mustRouteKey("path", "/files/{path...}")
	tests := []struct {
		name   string
		key    func(*http.Request) (string, bool)
		method string
		target string
		want   string // "": no key
	}{
		// The plain case.
		{"plain", anyHost, "GET", "http://inventory.test/sku/42", "sku:42"},
		// Escaped digits are the same resource, as on the server.
		{"escaped digits", anyHost, "GET", "http://inventory.test/sku/%34%32", "sku:42"},
		// An escaped slash is part of the value, as on the server.
		{"escaped slash", anyHost, "GET", "http://inventory.test/sku/a%2Fb", "sku:a/b"},
		// A literal percent stays one (no double unescaping).
		{"literal percent", anyHost, "GET", "http://inventory.test/sku/%2534", "sku:%34"},
		// Non-ASCII.
		{"unicode", anyHost, "GET", "http://inventory.test/sku/caf%C3%A9", "sku:café"},
		// The query is not part of the route.
		{"query", anyHost, "GET", "http://inventory.test/sku/42?sku=43", "sku:42"},
		// A trailing slash is another route.
		{"trailing slash", anyHost, "GET", "http://inventory.test/sku/42/", ""},
		// Paths the server would redirect rather than serve.
		{"double slash", anyHost, "GET", "http://inventory.test/sku//42", ""},
		{"dot dot", anyHost, "GET", "http://inventory.test/x/../sku/42", ""},
		// Another route.
		{"other route", anyHost, "GET", "http://inventory.test/healthz", ""},
		// Keys the middleware refuses (404) get no token either.
		{"nul", anyHost, "GET", "http://inventory.test/sku/a%00b", ""},
		{"newline", anyHost, "GET", "http://inventory.test/sku/a%0Ab", ""},
		// A host in the pattern: that host only, whatever the port.
		{"host", oneHost, "GET", "http://inventory.test/sku/42", "sku:42"},
		{"host and port", oneHost, "GET", "http://inventory.test:8080/sku/42", "sku:42"},
		{"other host", oneHost, "GET", "http://evil.test/sku/42", ""},
		// A method in the pattern: that method only (GET would also match HEAD).
		{"method", putOnly, "PUT", "http://inventory.test/sku/42", "sku:42"},
		{"other method", putOnly, "GET", "http://inventory.test/sku/42", ""},
		// Several routes to one resource.
		{"first route", twoRoutes, "GET", "http://inventory.test/items/lamp", "sku:lamp"},
		{"second route", twoRoutes, "PUT", "http://inventory.test/items/lamp/stock", "sku:lamp"},
		{"no route", twoRoutes, "PUT", "http://inventory.test/admin/items/lamp", ""},
		// A rest wildcard.
		{"rest", rest, "GET", "http://inventory.test/files/a/b", "path:a/b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, tt.target, nil)
			if err != nil {
				t.Fatal(err)
			}
			before := *req
			key, ok := tt.key(req)
			if ok != (tt.want != "") || key != tt.want {
				t.Errorf("key %q, %v; want %q", key, ok, tt.want)
			}
			if req.Pattern != before.Pattern || req.Host != before.Host || req.URL != before.URL {
				t.Error("the request was modified")
			}
		})
	}
}

// A request built by hand with no Host matches on its URL's host, where
// it will go.
func TestRouteKeyHostFromURL(t *testing.T) {
	key := mustRouteKey("sku", "inventory.test/sku/{sku}")
	req, _ := http.NewRequest(http.MethodGet, "http://inventory.test/sku/42", nil)
	req.Host = ""
	if k, ok := key(req); !ok || k != "sku:42" {
		t.Errorf("key %q, %v; want sku:42", k, ok)
	}
}

func TestRouteKeyBadPatterns(t *testing.T) {
	for name, patterns := range map[string][]string{
		"none":        nil,
		"no wildcard": {"/sku/42"},
		"other name":  {"/sku/{id}"},
		"invalid":     {"/sku/{sku"},
		"two {sku}":   {"/sku/{sku}/{sku}"},
		"conflict":    {"/sku/{sku}", "/sku/{sku}"},
	} {
		if _, err := httpmw.RouteKey("sku", patterns...); err == nil {
			t.Errorf("%s: RouteKey accepted the patterns", name)
		}
	}
}

// Client and server agree on every key: whenever RouteKey maps a path to
// a key, the middleware on http.ServeMux with PathValue claims exactly
// that key for it (on chi with ChiParam: integration/httpchi). The other direction (no key
// on the client) only ever costs the client its token, never the server
// a wrong claim.
func TestRouteKeyAgreesWithServer(t *testing.T) {
	key := mustRouteKey("sku", "/sku/{sku}")
	paths := []string{
		"/sku/42", "/sku/%34%32", "/sku/a%2Fb", "/sku/%2534", "/sku/caf%C3%A9", "/sku/%63af%C3%A9",
		"/sku/a%20b", "/sku/a+b", "/sku/a;b", "/sku/%3Bx", "/sku/~x", "/sku/%7Ex", "/sku/%2e%2e",
		"/sku/..", "/sku/.", "/sku/42/", "/sku//42", "/sku/%00", "/sku/%FF", "/sku/%", "/x/../sku/42",
		"/SKU/42", "/sku/42%2F", "/sku/%2F",
	}
	type server struct {
		name string
		h    func(s *seen) http.Handler
	}
	servers := []server{
		{"ServeMux", func(s *seen) http.Handler {
			var fence token.MemoryFence
			mux := http.NewServeMux()
			mux.Handle("/sku/{sku}", newMW(t, httpmw.Options{Resource: httpmw.PathValue("sku"), Fence: &fence}).Handler(s.handler()))
			return mux
		}},
	}
	compared := 0
	for _, p := range paths {
		req, err := http.NewRequest(http.MethodPut, "http://inventory.test"+p, nil)
		if err != nil {
			continue // not a URL a client can send
		}
		want, ok := key(req)
		if !ok {
			continue
		}
		compared++
		for _, srv := range servers {
			var s seen
			sreq := httptest.NewRequest(http.MethodPut, p, nil)
			sreq.Header.Set(token.Header, "7")
			w := httptest.NewRecorder()
			srv.h(&s).ServeHTTP(w, sreq)
			got := s.key.Load()
			if w.Code != http.StatusNoContent || got == nil || *got != want {
				t.Errorf("%s %s: client key %q; server %d, claimed %v: %s", srv.name, p, want, w.Code, got, strings.TrimSpace(w.Body.String()))
			}
		}
	}
	if compared < len(paths)/2 {
		t.Errorf("only %d of %d paths mapped to a key: the comparison proves little", compared, len(paths))
	}
}

// ChiParam reads the path value chi sets and unescapes it when the URL has
// an escaped form (chi routes on it and leaves values escaped); without
// the value it fails, naming the mounting mistake. Chi itself drives it in
// integration/httpchi.
func TestChiParamUnescapesChiValues(t *testing.T) {
	for _, c := range []struct{ target, value, want string }{
		{"/sku/42", "42", "sku:42"},
		{"/sku/%34%32", "%34%32", "sku:42"},
		{"/sku/%2534", "%34", "sku:%34"}, // no RawPath: chi routes on the unescaped path
	} {
		r := httptest.NewRequest(http.MethodPut, c.target, nil)
		r.SetPathValue("sku", c.value)
		if got, err := httpmw.ChiParam("sku")(r); got != c.want || err != nil {
			t.Errorf("%s: ChiParam = %q, %v; want %q", c.target, got, err, c.want)
		}
	}
	r := httptest.NewRequest(http.MethodPut, "/sku/42", nil)
	if _, err := httpmw.ChiParam("sku")(r); err == nil || !strings.Contains(err.Error(), "mount the middleware on the route") {
		t.Errorf("ChiParam without a path value = %v, want an error about mounting", err)
	}
}
