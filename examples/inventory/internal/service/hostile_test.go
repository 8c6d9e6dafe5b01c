package service_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fenceguard/fenceguard/examples/inventory/internal/service"
	"github.com/fenceguard/fenceguard/harness/pgserver"
	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/token"
)

// stateStore is a store with a way to count the fencing state it keeps.
type stateStore struct {
	service.Store
	// marks counts the marks kept anywhere: the items' own, and, on
	// PostgreSQL and MySQL, every row of fence_tokens (on PostgreSQL, but
	// the floor of pruned marks).
	marks func(t *testing.T) int
}

// statefulStores runs f against each store with its mark counter.
func statefulStores(t *testing.T, f func(t *testing.T, s stateStore)) {
	t.Run("memory", func(t *testing.T) {
		m := service.NewMemoryStore()
		f(t, stateStore{Store: m, marks: func(*testing.T) int { return m.Marks() }})
	})
	t.Run("postgres", func(t *testing.T) {
		pg := pgserver.Shared(t)
		ctx := context.Background()
		pool, err := pgxpool.New(ctx, pg.DSN)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		s, err := service.NewPostgresStore(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		f(t, stateStore{Store: s, marks: func(t *testing.T) int {
			var n int
			err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM fence_tokens WHERE resource <> '') + (SELECT count(*) FROM items WHERE fence_token > 0)`).Scan(&n)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}})
	})
	t.Run("mysql", func(t *testing.T) {
		s, db := myStore(t)
		f(t, stateStore{Store: s, marks: func(t *testing.T) int {
			var n int
			err := db.QueryRow(`SELECT (SELECT COUNT(*) FROM fence_tokens) + (SELECT COUNT(*) FROM items WHERE fence_token > 0)`).Scan(&n)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}})
	})
}

func mark(t *testing.T, s service.Store, sku string) token.Token {
	t.Helper()
	m, err := s.HighWater(context.Background(), sku)
	if err != nil {
		t.Fatalf("mark of %s: %v", sku, err)
	}
	return m
}

// Issue 18 #1: a request the handler refuses moves no mark — a bad body, a
// name that is no item, a name too long to be one.
func TestRefusedRequestsMoveNoMark(t *testing.T) {
	statefulStores(t, func(t *testing.T, s stateStore) {
		srv := newServer(t, s, false)
		call(t, srv, "PUT", "/admin/items/lamp", "", `{"stock": 5}`)
		if r := call(t, srv, "GET", "/items/lamp", "100", ""); r.status != 200 {
			t.Fatalf("read under 100: %d %s", r.status, r.body)
		}
		before := s.marks(t)

		// A bad body with a newer token: 400, and the mark stays at 100.
		for _, body := range []string{`{"stock":"x"}`, `{"stock":-1}`, `{}`, `not json`} {
			if r := call(t, srv, "PUT", "/items/lamp/stock", "101", body); r.status != 400 {
				t.Errorf("PUT %s under 101: %d %s, want 400", body, r.status, r.body)
			}
		}
		if m := mark(t, s, "lamp"); m != 100 {
			t.Errorf("mark %d after 400s under 101, want 100", m)
		}
		if r := call(t, srv, "PUT", "/items/lamp/stock", "100", `{"stock":4}`); r.status != 200 {
			t.Errorf("the holder of 100 after the 400s: %d %s, want 200", r.status, r.body)
		}

		// An unknown item under 5, then under 4: 404 both times, never 409,
		// and once the item exists an older token is not refused because of
		// a mark its absence left.
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/items/nope", ""}, {"PUT", "/items/nope/stock", `{"stock":1}`}, {"POST", "/items/nope/sell", ""},
		} {
			for _, tok := range []string{"5", "4"} {
				if r := call(t, srv, c.method, c.path, tok, c.body); r.status != 404 || r.problem.Type != service.TypeNoItem {
					t.Errorf("%s %s under %s: %d %s, want 404 no-item", c.method, c.path, tok, r.status, r.body)
				}
			}
		}
		call(t, srv, "PUT", "/admin/items/nope", "", `{"stock": 1}`)
		if r := call(t, srv, "GET", "/items/nope", "3", ""); r.status != 200 {
			t.Errorf("the new item under 3: %d %s, want 200", r.status, r.body)
		}
		call(t, srv, "GET", "/items/nope", "5", "") // one mark more, on purpose
		before++

		// A name longer than any item's (200): 404, like the handler's.
		long := strings.Repeat("a", 300)
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/items/" + long, ""}, {"PUT", "/items/" + long + "/stock", `{"stock":1}`}, {"POST", "/items/" + long + "/sell", ""},
		} {
			if r := call(t, srv, c.method, c.path, "9", c.body); r.status != 404 || r.problem.Type != service.TypeNoItem {
				t.Errorf("%s of a 300-byte name: %d %s, want 404 no-item", c.method, r.status, r.body)
			}
		}
		if after := s.marks(t); after != before {
			t.Errorf("%d marks after refused requests, want %d", after, before)
		}
	})
}

func randomSKU() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "nx-" + hex.EncodeToString(b)
}

// Issue 18 #2, the service's side: thousands of valid tokens for names
// that are no item create no state.
func TestUnknownItemsLeaveNoState(t *testing.T) {
	const n = 3000
	statefulStores(t, func(t *testing.T, s stateStore) {
		srv := newServer(t, s, false)
		call(t, srv, "PUT", "/admin/items/lamp", "", `{"stock": 5}`)
		call(t, srv, "GET", "/items/lamp", "10", "")
		before := s.marks(t)
		client := srv.Client()
		var wg sync.WaitGroup
		var mu sync.Mutex
		statuses := map[int]int{}
		for w := range 4 {
			wg.Go(func() {
				for i := w; i < n; i += 4 {
					sku := randomSKU()
					var req *http.Request
					switch i % 3 {
					case 0:
						req, _ = http.NewRequest("GET", srv.URL+"/items/"+sku, nil)
					case 1:
						req, _ = http.NewRequest("PUT", srv.URL+"/items/"+sku+"/stock", strings.NewReader(`{"stock":1}`))
					default:
						req, _ = http.NewRequest("POST", srv.URL+"/items/"+sku+"/sell", nil)
					}
					req.Header.Set(token.Header, fmt.Sprint(1000+i))
					resp, err := client.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					resp.Body.Close()
					mu.Lock()
					statuses[resp.StatusCode]++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if statuses[404] != n {
			t.Errorf("statuses %v, want %d 404s", statuses, n)
		}
		if after := s.marks(t); after != before {
			t.Errorf("%d marks after %d requests for unknown items, want %d", after, n, before)
		}
	})
}

// Issue 18 #3: the largest token there is, 2^64−1, is refused as forged
// (the clock bound) on both stores, and the honest holder is not locked out.
func TestLargestTokenRefused(t *testing.T) {
	statefulStores(t, func(t *testing.T, s stateStore) {
		srv := newServer(t, s, false)
		call(t, srv, "PUT", "/admin/items/lamp", "", `{"stock": 5}`)
		call(t, srv, "GET", "/items/lamp", "10", "")
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/items/lamp", ""}, {"PUT", "/items/lamp/stock", `{"stock":0}`}, {"POST", "/items/lamp/sell", ""},
		} {
			if r := call(t, srv, c.method, c.path, "18446744073709551615", c.body); r.status != 403 || r.problem.Type != httpmw.TypeForged {
				t.Errorf("%s %s under 2^64-1: %d %s, want 403 forged", c.method, c.path, r.status, r.body)
			}
		}
		if m := mark(t, s, "lamp"); m != 10 {
			t.Errorf("mark %d, want 10", m)
		}
		if r := call(t, srv, "PUT", "/items/lamp/stock", "11", `{"stock":4}`); r.status != 200 {
			t.Errorf("the honest holder after 2^64-1: %d %s", r.status, r.body)
		}
		// The store's own check too, for a store used without the middleware.
		if _, err := s.Get(context.Background(), "lamp", token.Token(1<<64-1)); err == nil {
			t.Errorf("the store accepted 2^64-1")
		}
	})
}

// Issue 18 #6: 405 says what is allowed, HEAD answers like GET without a
// body, OPTIONS answers 204 with Allow.
func TestMethods(t *testing.T) {
	srv := newServer(t, service.NewMemoryStore(), false)
	call(t, srv, "PUT", "/admin/items/lamp", "", `{"stock": 5}`)
	do := func(method, path, tok string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		if tok != "" {
			req.Header.Set(token.Header, tok)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		resp.Body.Close()
		if (method == "HEAD" || resp.StatusCode == 204) && b.Len() != 0 {
			t.Errorf("%s %s: body %q", method, path, b.String())
		}
		return resp
	}
	for _, c := range []struct {
		method, path, tok string
		status            int
		allow             string
	}{
		{"DELETE", "/items/lamp", "", 405, "GET, HEAD, OPTIONS"},
		{"POST", "/items/lamp", "", 405, "GET, HEAD, OPTIONS"},
		{"GET", "/items/lamp/stock", "", 405, "PUT, OPTIONS"},
		{"GET", "/items/lamp/sell", "", 405, "POST, OPTIONS"},
		{"DELETE", "/admin/items/lamp", "", 405, "GET, HEAD, PUT, OPTIONS"},
		{"POST", "/healthz", "", 405, "GET, HEAD, OPTIONS"},
		{"OPTIONS", "/items/lamp", "", 204, "GET, HEAD, OPTIONS"},
		{"OPTIONS", "/items/lamp/stock", "7", 204, "PUT, OPTIONS"},
		{"OPTIONS", "/admin/items/lamp/reset-mark", "", 204, "POST, OPTIONS"},
		{"OPTIONS", "/nothing", "", 404, ""},
		{"HEAD", "/items/lamp", "", 200, ""},
		{"HEAD", "/items/lamp", "20", 200, ""},
		{"HEAD", "/items/lamp", "19", 409, ""}, // claims like GET: 20 was seen
		{"HEAD", "/items/nope", "21", 404, ""},
		{"HEAD", "/admin/items/lamp", "", 200, ""},
		{"HEAD", "/healthz", "", 200, ""},
		{"HEAD", "/metrics", "", 200, ""},
	} {
		resp := do(c.method, c.path, c.tok)
		if resp.StatusCode != c.status || resp.Header.Get("Allow") != c.allow {
			t.Errorf("%s %s: %d Allow %q, want %d %q", c.method, c.path, resp.StatusCode, resp.Header.Get("Allow"), c.status, c.allow)
		}
		if c.method == "HEAD" && c.status == 200 && c.path == "/items/lamp" && resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("HEAD %s: content type %q, want GET's", c.path, resp.Header.Get("Content-Type"))
		}
	}
}

// Issue 18 #4, the service's side: refusals are expected traffic — the
// first of each kind is logged at Info, the flood is not.
func TestRefusalsNotLoggedEachAtInfo(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	h, err := service.New(service.Options{Store: service.NewMemoryStore(), Registry: prometheus.NewRegistry(),
		Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	call(t, srv, "PUT", "/admin/items/lamp", "", `{"stock": 5}`)
	call(t, srv, "GET", "/items/lamp", "100", "")
	for range 200 {
		call(t, srv, "GET", "/items/lamp", "99", "")                     // stale, the store's
		call(t, srv, "PUT", "/items/lamp/stock", "abc", `{"stock":1}`)   // malformed, the middleware's
		call(t, srv, "PUT", "/items/lamp/stock", "", `{"stock":1}`)      // missing
		call(t, srv, "GET", "/items/lamp", "18446744073709551615", "")   // forged
		call(t, srv, "GET", "/items/"+strings.Repeat("b", 300), "7", "") // no such item
	}
	mu.Lock()
	defer mu.Unlock()
	lines := strings.Count(logs.String(), "\n")
	if lines == 0 || lines > 5 {
		t.Errorf("%d log lines for 1000 refusals of 5 kinds, want 1 to 5:\n%s", lines, logs.String())
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Issue 18 #5: every refusal the middleware makes is counted, header-parse
// refusals included (they never reach a Fence or a Check).
func TestRefusalsCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	h, err := service.New(service.Options{Store: service.NewMemoryStore(), Registry: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	call(t, srv, "PUT", "/admin/items/lamp", "", `{"stock": 5}`)
	for range 50 {
		call(t, srv, "PUT", "/items/lamp/stock", "abc", `{"stock":1}`) // malformed: 400
		call(t, srv, "PUT", "/items/lamp/stock", "", `{"stock":1}`)    // missing: 428
		call(t, srv, "GET", "/items/lamp", "18446744073709551615", "") // forged: 403
	}
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`fenceguard_http_requests_total{class="none",result="invalid"} 50`,
		`fenceguard_http_requests_total{class="none",result="missing"} 50`,
		`fenceguard_http_requests_total{class="sku",result="forged"} 50`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(string(body), "fenceguard_http_requests_total"))
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
