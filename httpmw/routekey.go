package httpmw

import (
	"fmt"
	"net/http"
	"strings"
)

// RouteKey returns a [Transport.Key] for the resources a server fences on
// the given routes: a request that matches one of the patterns maps to the
// key the key template (as [PathValue] reads it) builds from the pattern's
// wildcard — the key [PathValue](template) derives on a server that routes
// with [http.ServeMux], and [ChiParam](template) on chi, for the same
// route. So RouteKey("account:{id}", "/accounts/{id}/debit") maps
// /accounts/7/debit to "account:7", and RouteKey("sku", "/sku/{sku}") maps
// /sku/42 and /sku/%34%32 alike to "sku:42", as the server does. A request
// that matches no pattern (or sets URL.Opaque, whose path ServeMux does not
// read), or whose key the middleware would refuse
// (answering 404: a value the template's :int refuses, among others), maps
// to no key, and the Transport sends it without the token — so a fenced
// write to /accounts/01/debit is answered 428 (no token), where the same
// request with the token would have drawn 404: the token is never sent to
// a key its lock was not granted for.
//
// One Transport serves several kinds of resources with one Key that asks
// each RouteKey in turn; the first that knows the request answers:
//
//	accounts, _ := httpmw.RouteKey("account:{id:int}", "/accounts/{id}/debit")
//	orders, _ := httpmw.RouteKey("order:{id}", "/orders/{id}", "/orders/{id}/items")
//	key := func(r *http.Request) (string, bool) {
//		if k, ok := accounts(r); ok {
//			return k, true
//		}
//		return orders(r)
//	}
//	client := &http.Client{Transport: &httpmw.Transport{Key: key}}
//
// Patterns are [http.ServeMux] patterns, "[METHOD ][HOST]/PATH", matched
// by a ServeMux exactly as a server's would match them (the path cleaned
// and the wildcard unescaped the same way; a request the server would
// redirect matches nothing). A pattern with a host matches only requests
// for that host (the Host header the server will see, without the port),
// so a token cannot go to another service whose paths look alike; one
// without matches the path on any host — enough when every server this
// client sends the context's requests to keys its resources apart. A
// pattern without a method matches every method, which is what a client
// wants: reads claim too.
//
// It fails with a descriptive error when the template is malformed, there
// is no pattern, a pattern has no {name} (or {name...}) wildcard, or a
// pattern is invalid or conflicts with another. The function it returns is safe
// for concurrent use.
func RouteKey(template string, patterns ...string) (func(*http.Request) (string, bool), error) {
	kt, err := parseTemplate("RouteKey", template)
	if err != nil {
		return nil, err
	}
	name := kt.name
	if len(patterns) == 0 {
		return nil, fmt.Errorf("httpmw: RouteKey(%q) without a pattern", template)
	}
	mux := http.NewServeMux()
	match := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if m, ok := w.(*routeMatch); ok {
			m.value, m.ok = r.PathValue(name), true
		}
	})
	for _, p := range patterns {
		if !strings.Contains(p, "{"+name+"}") && !strings.Contains(p, "{"+name+"...}") {
			return nil, fmt.Errorf("httpmw: RouteKey: pattern %q has no {%s} wildcard", p, name)
		}
		if err := register(mux, p, match); err != nil {
			return nil, fmt.Errorf("httpmw: RouteKey: %v", err)
		}
	}
	keys := newKeyCache(kt.prefix)
	return func(r *http.Request) (string, bool) {
		// A shallow copy: ServeMux records its match in the request it
		// serves, and a RoundTripper must not modify the caller's.
		if r.URL == nil || r.URL.Opaque != "" {
			return "", false // the path sent is not the one ServeMux would read
		}
		m := &routeMatch{}
		r2 := r.WithContext(r.Context())
		if r2.Host == "" && r2.URL != nil {
			r2.Host = r2.URL.Host // what the client will send as Host
		}
		mux.ServeHTTP(m, r2)
		if !m.ok || m.value == "" || kt.value("RouteKey", m.value) != nil {
			return "", false
		}
		key := keys.key(m.value)
		if checkKey(key) != nil {
			return "", false // the server would answer 404 to the token
		}
		return key, true
	}, nil
}

// register is mux.Handle, with its panic on a bad or conflicting pattern
// turned into an error.
func register(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("pattern %q: %v", pattern, v)
		}
	}()
	mux.Handle(pattern, h)
	return nil
}

// routeMatch is the ResponseWriter RouteKey's ServeMux serves into: the
// matching handler leaves the wildcard's value there; redirects and
// not-found answers are discarded.
type routeMatch struct {
	h     http.Header
	value string
	ok    bool
}

func (m *routeMatch) Header() http.Header {
	if m.h == nil {
		m.h = make(http.Header)
	}
	return m.h
}

func (m *routeMatch) Write(b []byte) (int, error) { return len(b), nil }
func (m *routeMatch) WriteHeader(int)             {}
