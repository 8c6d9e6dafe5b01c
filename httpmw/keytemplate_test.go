package httpmw_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/token"
)

// Two kinds of resource served under the same wildcard name keep apart:
// each template's prefix names its kind, so an account's holder and an
// order's never meet at one mark.
func TestKeyTemplatePrefixKeepsKindsApart(t *testing.T) {
	var fence token.MemoryFence
	var s seen
	accounts := newMW(t, httpmw.Options{Resource: httpmw.PathValue("account:{id}"), Fence: &fence})
	orders := newMW(t, httpmw.Options{Resource: httpmw.PathValue("order:{id}"), Fence: &fence})
	mux := http.NewServeMux()
	mux.Handle("POST /accounts/{id}/debit", accounts.Handler(s.handler()))
	mux.Handle("PUT /orders/{id}", orders.Handler(s.handler()))

	if w := serve(t, mux, http.MethodPost, "/accounts/7/debit", "9"); w.Code != http.StatusNoContent || *s.key.Load() != "account:7" {
		t.Fatalf("account: %d, key %q: %s", w.Code, *s.key.Load(), w.Body)
	}
	// A lower token on the order with the same id is not stale: another mark.
	if w := serve(t, mux, http.MethodPut, "/orders/7", "5"); w.Code != http.StatusNoContent || *s.key.Load() != "order:7" {
		t.Fatalf("order: %d, key %q: %s", w.Code, *s.key.Load(), w.Body)
	}
	if fence.HighWater("account:7") != 9 || fence.HighWater("order:7") != 5 {
		t.Errorf("marks: account:7 %d, order:7 %d; want 9 and 5", fence.HighWater("account:7"), fence.HighWater("order:7"))
	}
}

// {name:int} admits an integer only in the form strconv.FormatInt writes,
// so one row cannot be named, and locked, twice; every other spelling is a
// 404 that claims nothing.
func TestKeyTemplateIntIsCanonical(t *testing.T) {
	cases := []struct {
		target string
		key    string // "": refused with 404
	}{
		{"/accounts/7", "account:7"},
		{"/accounts/0", "account:0"},
		{"/accounts/-3", "account:-3"},
		{"/accounts/9223372036854775807", "account:9223372036854775807"},
		{"/accounts/%37", "account:7"}, // an escaped digit is the same path
		{"/accounts/01", ""},
		{"/accounts/00", ""},
		{"/accounts/+1", ""},
		{"/accounts/-0", ""},
		{"/accounts/%201", ""},
		{"/accounts/1%20", ""},
		{"/accounts/1.0", ""},
		{"/accounts/1e3", ""},
		{"/accounts/0x1", ""},
		{"/accounts/1_000", ""},
		{"/accounts/%D9%A1", ""}, // ARABIC-INDIC DIGIT ONE
		{"/accounts/9223372036854775808", ""},
		{"/accounts/abc", ""},
	}
	for _, c := range cases {
		t.Run(c.target, func(t *testing.T) {
			var fence token.MemoryFence
			var s seen
			mux := http.NewServeMux()
			mux.Handle("PUT /accounts/{id}", newMW(t, httpmw.Options{Resource: httpmw.PathValue("account:{id:int}"), Fence: &fence}).Handler(s.handler()))
			w := serve(t, mux, http.MethodPut, c.target, "7")
			if c.key == "" {
				p := decodeProblem(t, w, http.StatusNotFound)
				if p.Type != httpmw.TypeNoResource || fence.Len() != 0 || s.calls.Load() != 0 {
					t.Errorf("type %q, %d marks, %d calls; want no-resource, none, none", p.Type, fence.Len(), s.calls.Load())
				}
				return
			}
			if w.Code != http.StatusNoContent || *s.key.Load() != c.key {
				t.Fatalf("status %d, key %v: %s", w.Code, s.key.Load(), w.Body)
			}

			// The client derives the same key, and none where the server refuses.
			rk, err := httpmw.RouteKey("account:{id:int}", "/accounts/{id}")
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodPut, "http://bank.test"+c.target, nil)
			if got, ok := rk(req); got != c.key || ok != (c.key != "") {
				t.Errorf("RouteKey = %q, %v; want %q", got, ok, c.key)
			}
		})
	}
	rk, _ := httpmw.RouteKey("account:{id:int}", "/accounts/{id}")
	if got, ok := rk(httptest.NewRequest(http.MethodPut, "http://bank.test/accounts/01", nil)); ok {
		t.Errorf("RouteKey mapped /accounts/01 to %q", got)
	}
}

// ChiParam reads templates as PathValue does, after unescaping chi's value.
func TestChiParamTemplate(t *testing.T) {
	for _, c := range []struct{ tmpl, target, value, want string }{
		{"account:{id}", "/accounts/7", "7", "account:7"},
		{"account:{id:int}", "/accounts/%37", "%37", "account:7"},
		{"account:{id:int}", "/accounts/01", "01", ""},
	} {
		r := httptest.NewRequest(http.MethodPut, c.target, nil)
		r.SetPathValue("id", c.value)
		got, err := httpmw.ChiParam(c.tmpl)(r)
		if got != c.want || (err == nil) != (c.want != "") {
			t.Errorf("ChiParam(%q) on %s = %q, %v; want %q", c.tmpl, c.target, got, err, c.want)
		}
	}
}

// A malformed template is a programming error: PathValue and ChiParam
// panic, RouteKey fails, each naming the template.
func TestKeyTemplateMalformed(t *testing.T) {
	for _, tmpl := range []string{
		"", "{id}", "account:{id", "account:{id}x", "account:{}", "account:{id:uint}",
		"account:{1d}", "a{b}:{id}", "account:", "a:b", "account}{id}", "sku-x",
	} {
		func() {
			defer func() {
				if v := recover(); v == nil || !strings.Contains(v.(error).Error(), tmpl) {
					t.Errorf("PathValue(%q) panicked with %v, want an error naming the template", tmpl, v)
				}
			}()
			httpmw.PathValue(tmpl)
		}()
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("ChiParam(%q) did not panic", tmpl)
				}
			}()
			httpmw.ChiParam(tmpl)
		}()
		if _, err := httpmw.RouteKey(tmpl, "/accounts/{id}"); err == nil {
			t.Errorf("RouteKey(%q) accepted the template", tmpl)
		}
	}
	if _, err := httpmw.RouteKey("account:{id}", "/accounts/{sku}"); err == nil {
		t.Error("RouteKey accepted a pattern without the template's wildcard")
	}
}
