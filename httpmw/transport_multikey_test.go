package httpmw_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/token"
)

// Inside guard.DoAll, and inside a Do nested in it, the Transport sends
// each resource the token of its own key, nothing to a resource whose key
// the section does not hold, and the innermost section's tokens win for a
// key held twice.
func TestTransportSendsEachKeyItsOwnTokenFromASetContext(t *testing.T) {
	var mu sync.Mutex
	got := map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.URL.Path] = r.Header.Get(token.Header)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	client := &http.Client{Transport: &httpmw.Transport{Key: func(r *http.Request) (string, bool) {
		sku, ok := strings.CutPrefix(r.URL.Path, "/sku/")
		return "sku:" + sku, ok
	}}}
	g, err := guard.New(memlock.New(), guard.Options{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	send := func(ctx context.Context, path string) string {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		mu.Lock()
		defer mu.Unlock()
		return got[path]
	}
	err = g.DoAll(ctx, []string{"sku:2", "sku:1", "sku:3"}, func(ctx context.Context, tokens map[string]token.Token) error {
		for _, sku := range []string{"1", "2", "3"} {
			if h, want := send(ctx, "/sku/"+sku), tokens["sku:"+sku].String(); h != want {
				t.Errorf("/sku/%s got token %q, want its own key's %q", sku, h, want)
			}
		}
		if h := send(ctx, "/sku/4"); h != "" {
			t.Errorf("/sku/4, not held, got token %q", h)
		}
		if h := send(ctx, "/other"); h != "" {
			t.Errorf("/other got token %q", h)
		}
		return g.Do(ctx, "sku:4", func(ctx context.Context, t4 token.Token) error {
			if h := send(ctx, "/sku/4"); h != t4.String() {
				t.Errorf("/sku/4 inside a nested Do got %q, want %q", h, t4.String())
			}
			if h, want := send(ctx, "/sku/1"), tokens["sku:1"].String(); h != want {
				t.Errorf("/sku/1 inside a nested Do got %q, want the set's %q", h, want)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}
