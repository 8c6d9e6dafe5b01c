package httpchi_test

import (
	"fmt"
	"log"
	"net/http"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/token"
)

// chiRoute mounts mw on PUT /sku/{sku}, as an application would.
func chiRoute(mw *httpmw.Middleware, h http.Handler) http.Handler {
	r := chi.NewRouter()
	r.With(mw.Handler).Method(http.MethodPut, "/sku/{sku}", h)
	return r
}

// Every spelling of a path names one resource on chi, whose parameters
// stay escaped when the URL has an escaped form; keys the middleware must
// refuse answer 404 and claim nothing.
func TestChiParamKeys(t *testing.T) {
	tests := []struct {
		name   string
		param  string
		target string
		status int
		key    string // claimed key on success
	}{
		{"plain", "sku", "/sku/42", http.StatusNoContent, "sku:42"},
		{"escaped digits", "sku", "/sku/%34%32", http.StatusNoContent, "sku:42"},
		{"escaped slash", "sku", "/sku/a%2Fb", http.StatusNoContent, "sku:a/b"},
		{"literal percent, no double unescaping", "sku", "/sku/%2534", http.StatusNoContent, "sku:%34"},
		{"unicode", "sku", "/sku/caf%C3%A9", http.StatusNoContent, "sku:café"},
		{"nul", "sku", "/sku/a%00b", http.StatusNotFound, ""},
		{"newline", "sku", "/sku/a%0Ab", http.StatusNotFound, ""},
		{"invalid utf-8", "sku", "/sku/%FF", http.StatusNotFound, ""},
		{"longer than 512 bytes", "sku", "/sku/" + strings.Repeat("x", 512), http.StatusNotFound, ""},
		{"misspelt parameter", "id", "/sku/42", http.StatusNotFound, ""},
		// Key templates: the prefix names the kind; {sku:int} admits an
		// integer only in its canonical form, checked after unescaping.
		{"template", "item:{sku}", "/sku/42", http.StatusNoContent, "item:42"},
		{"int template", "item:{sku:int}", "/sku/42", http.StatusNoContent, "item:42"},
		{"int template, escaped digits", "item:{sku:int}", "/sku/%34%32", http.StatusNoContent, "item:42"},
		{"int template, leading zero", "item:{sku:int}", "/sku/042", http.StatusNotFound, ""},
		{"int template, escaped leading zero", "item:{sku:int}", "/sku/%30%34%32", http.StatusNotFound, ""},
		{"int template, plus sign", "item:{sku:int}", "/sku/%2B42", http.StatusNotFound, ""},
		{"int template, space", "item:{sku:int}", "/sku/%2042", http.StatusNotFound, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var fence token.MemoryFence
			var s seen
			h := chiRoute(newMW(t, httpmw.Options{Resource: httpmw.ChiParam(tt.param), Fence: &fence}), s.handler())
			w := serve(t, h, http.MethodPut, tt.target, "7")
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tt.status, w.Body)
			}
			if tt.status != http.StatusNoContent {
				if fence.Len() != 0 {
					t.Errorf("fence holds %d keys, want 0", fence.Len())
				}
				return
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
	if w := serve(t, r, http.MethodPut, "/sku/42", "7"); w.Code != http.StatusNotFound {
		t.Errorf("mounted too early: status %d, want 404", w.Code)
	}
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

// Client and server agree on every key: whenever RouteKey maps a path to
// a key, the middleware on chi with ChiParam claims exactly that key.
func TestRouteKeyAgreesWithChi(t *testing.T) {
	key, err := httpmw.RouteKey("sku", "/sku/{sku}")
	if err != nil {
		t.Fatal(err)
	}
	paths := []string{
		"/sku/42", "/sku/%34%32", "/sku/a%2Fb", "/sku/%2534", "/sku/caf%C3%A9", "/sku/%63af%C3%A9",
		"/sku/a%20b", "/sku/a+b", "/sku/a;b", "/sku/%3Bx", "/sku/~x", "/sku/%7Ex", "/sku/%2e%2e",
		"/sku/..", "/sku/.", "/sku/42/", "/sku//42", "/sku/%00", "/sku/%FF", "/sku/%", "/x/../sku/42",
		"/SKU/42", "/sku/42%2F", "/sku/%2F",
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
		var fence token.MemoryFence
		var s seen
		r := chi.NewRouter()
		r.With(newMW(t, httpmw.Options{Resource: httpmw.ChiParam("sku"), Fence: &fence}).Handler).Handle("/sku/{sku}", s.handler())
		w := serve(t, r, http.MethodPut, p, "7")
		if got := s.key.Load(); w.Code != http.StatusNoContent || got == nil || *got != want {
			t.Errorf("%s: client key %q; server %d, claimed %v: %s", p, want, w.Code, got, strings.TrimSpace(w.Body.String()))
		}
	}
	if compared < len(paths)/2 {
		t.Errorf("only %d of %d paths mapped to a key: the comparison proves little", compared, len(paths))
	}
}

// ChiValue names the item as ChiParam named the resource, and fails
// without the parameter.
func TestChiValue(t *testing.T) {
	var got string
	var gotErr error
	r := chi.NewRouter()
	r.Get("/sku/{sku}", func(w http.ResponseWriter, r *http.Request) { got, gotErr = httpmw.ChiValue(r, "sku") })
	r.Get("/other", func(w http.ResponseWriter, r *http.Request) { got, gotErr = httpmw.ChiValue(r, "sku") })
	serve(t, r, http.MethodGet, "/sku/%34%32", "")
	if got != "42" || gotErr != nil {
		t.Errorf("ChiValue on /sku/%%34%%32 = %q, %v; want 42", got, gotErr)
	}
	serve(t, r, http.MethodGet, "/other", "")
	if gotErr == nil {
		t.Errorf("ChiValue without the parameter = %q, want an error", got)
	}
}

// On chi, mount the middleware on the route (With), where chi has matched
// {sku}; ChiParam unescapes the value, so every spelling of a path is one
// resource.
func ExampleChiParam() {
	var fence token.MemoryFence
	mw, err := httpmw.New(httpmw.Options{Resource: httpmw.ChiParam("sku"), Fence: &fence})
	if err != nil {
		log.Fatal(err)
	}
	r := chi.NewRouter()
	r.With(mw.Handler).Put("/sku/{sku}", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	// A read without a token passes; with one it claims like a write.
	r.With(mw.Handler).Get("/sku/{sku}", func(w http.ResponseWriter, r *http.Request) {
		_, t, fenced := token.FromContext(r.Context())
		fmt.Printf("  read, fenced: %v (token %d)\n", fenced, t)
	})

	fmt.Println("PUT /sku/42 with 7:", send(r, "PUT", "/sku/42", "7"))
	fmt.Println("PUT /sku/%34%32 with 6:", send(r, "PUT", "/sku/%34%32", "6"))
	fmt.Println("GET without a token:", send(r, "GET", "/sku/42", ""))
	fmt.Println("GET with 9:", send(r, "GET", "/sku/42", "9"))
	fmt.Println("high-water of sku:42:", fence.HighWater("sku:42"))
	// Output:
	// PUT /sku/42 with 7: 204
	// PUT /sku/%34%32 with 6: 409 stale-token
	//   read, fenced: false (token 0)
	// GET without a token: 200
	//   read, fenced: true (token 9)
	// GET with 9: 200
	// high-water of sku:42: 9
}
