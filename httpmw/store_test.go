package httpmw_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/token"
)

// With ClaimInStore the middleware parses and checks, the handler gets the
// token in its context, and nothing is claimed: the store claims (here a
// MemoryFence the handler calls, standing for a store's own marks), so a
// request the handler refuses leaves no mark.
func TestClaimInStore(t *testing.T) {
	var store token.MemoryFence
	mw, err := httpmw.New(httpmw.Options{
		Resource: httpmw.PathValue("sku"),
		Fence:    httpmw.ClaimInStore,
		Check:    token.ClockBound{},
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("PUT /sku/{sku}", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("bad") { // refused before any access: no claim
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		key, tok, _ := token.FromContext(r.Context())
		if err := store.Claim(r.Context(), key, tok); err != nil {
			httpmw.WriteStale(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})))
	put := func(target, tok string) int {
		r := httptest.NewRequest("PUT", target, nil)
		if tok != "" {
			r.Header.Set(token.Header, tok)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w.Code
	}
	for _, c := range []struct {
		target, tok string
		want        int
		mark        token.Token
	}{
		{"/sku/1", "10", 204, 10},
		{"/sku/1?bad", "20", 400, 10},               // the handler refused: the mark stays
		{"/sku/1", "9", 409, 10},                    // the store's claim refuses the stale one
		{"/sku/1", "18446744073709551615", 403, 10}, // the Check still runs
		{"/sku/1", "abc", 400, 10},                  // and the header is parsed
		{"/sku/1", "", http.StatusPreconditionRequired, 10},
	} {
		if got := put(c.target, c.tok); got != c.want {
			t.Errorf("PUT %s with %q = %d, want %d", c.target, c.tok, got, c.want)
		}
		if got := store.HighWater("sku:1"); got != c.mark {
			t.Errorf("after PUT %s with %q the mark is %d, want %d", c.target, c.tok, got, c.mark)
		}
	}
}
