package service_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fenceguard/fenceguard/examples/inventory/internal/service"
	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/mysqlserver"
	"github.com/fenceguard/fenceguard/harness/pgserver"
	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/token"
)

func TestMain(m *testing.M) { harness.Main(m) }

// stores runs f against each store: memory, and PostgreSQL and MariaDB
// from the harness.
func stores(t *testing.T, f func(t *testing.T, newStore func(t *testing.T) service.Store)) {
	t.Run("memory", func(t *testing.T) {
		f(t, func(*testing.T) service.Store { return service.NewMemoryStore() })
	})
	t.Run("postgres", func(t *testing.T) {
		f(t, func(t *testing.T) service.Store { return pgStore(t) })
	})
	t.Run("mysql", func(t *testing.T) {
		f(t, func(t *testing.T) service.Store { s, _ := myStore(t); return s })
	})
}

// myStore returns a MySQLStore on a fresh database, and the pool under it.
func myStore(t *testing.T) (*service.MySQLStore, *sql.DB) {
	t.Helper()
	my := mysqlserver.Shared(t)
	db, err := sql.Open("mysql", my.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s, err := service.NewMySQLStore(context.Background(), db, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return s, db
}

func pgStore(t *testing.T) *service.PostgresStore {
	t.Helper()
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
	return s
}

func newServer(t *testing.T, store service.Store, unfenced bool) *httptest.Server {
	t.Helper()
	h, err := service.New(service.Options{Store: store, Unfenced: unfenced, Registry: prometheus.NewRegistry(),
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

type response struct {
	status  int
	ctype   string
	body    string
	problem httpmw.Problem
}

// call sends one request; tok, when not empty, is the X-Fencing-Token header.
func call(t *testing.T, srv *httptest.Server, method, path, tok, body string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set(token.Header, tok)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := response{status: resp.StatusCode, ctype: resp.Header.Get("Content-Type"), body: string(b)}
	if r.ctype == httpmw.ContentType {
		if err := json.Unmarshal(b, &r.problem); err != nil {
			t.Fatalf("%s %s: problem body %q: %v", method, path, b, err)
		}
	}
	return r
}

// The fenced routes: status codes and problem bodies for every way a token
// can be wrong, on both stores.
func TestFencedEndpoints(t *testing.T) {
	stores(t, func(t *testing.T, newStore func(*testing.T) service.Store) {
		srv := newServer(t, newStore(t), false)
		if r := call(t, srv, "PUT", "/admin/items/lamp", "", `{"stock": 5}`); r.status != 200 {
			t.Fatalf("seeding: %d %s", r.status, r.body)
		}
		for _, c := range []struct {
			name, method, path, tok, body string
			status                        int
			typ                           string // problem type; "" for a JSON success
			want                          string // in the body
		}{
			// A read without a token is a plain read: browsing needs no lock.
			{"read without token", "GET", "/items/lamp", "", "", 200, "", `"stock":5`},
			// Writing without a token is what fencing refuses first.
			{"write without token", "PUT", "/items/lamp/stock", "", `{"stock":4}`, 428, httpmw.TypeMissing, ""},
			// Malformed tokens: one spelling per token, nothing else.
			{"token not digits", "PUT", "/items/lamp/stock", "abc", `{"stock":4}`, 400, httpmw.TypeInvalid, ""},
			{"token leading zero", "PUT", "/items/lamp/stock", "07", `{"stock":4}`, 400, httpmw.TypeInvalid, ""},
			{"token zero", "PUT", "/items/lamp/stock", "0", `{"stock":4}`, 400, httpmw.TypeInvalid, ""},
			{"token negative", "PUT", "/items/lamp/stock", "-7", `{"stock":4}`, 400, httpmw.TypeInvalid, ""},
			{"token too large", "GET", "/items/lamp", "99999999999999999999999", "", 400, httpmw.TypeInvalid, ""},
			// A good token claims and writes.
			{"write token 10", "PUT", "/items/lamp/stock", "10", `{"stock":4}`, 200, "", `"stock":4`},
			{"read token 10 again", "GET", "/items/lamp", "10", "", 200, "", `"stock":4`},
			// A lower one is stale, on reads and writes, with the mark.
			{"read stale", "GET", "/items/lamp", "9", "", 409, httpmw.TypeStale, `"current":"10"`},
			{"write stale", "PUT", "/items/lamp/stock", "9", `{"stock":3}`, 409, httpmw.TypeStale, `"current":"10"`},
			// A higher one claims the item from the holder of 10.
			{"read token 11", "GET", "/items/lamp", "11", "", 200, "", `"stock":4`},
			{"write 10 after 11", "PUT", "/items/lamp/stock", "10", `{"stock":3}`, 409, httpmw.TypeStale, `"current":"11"`},
			// Bodies.
			{"body negative", "PUT", "/items/lamp/stock", "11", `{"stock":-1}`, 400, service.TypeBadBody, "between 0 and"},
			{"body string", "PUT", "/items/lamp/stock", "11", `{"stock":"3"}`, 400, service.TypeBadBody, ""},
			{"body empty object", "PUT", "/items/lamp/stock", "11", `{}`, 400, service.TypeBadBody, ""},
			{"body unknown field", "PUT", "/items/lamp/stock", "11", `{"stock":3,"price":1}`, 400, service.TypeBadBody, ""},
			{"body two values", "PUT", "/items/lamp/stock", "11", `{"stock":3}{"stock":2}`, 400, service.TypeBadBody, ""},
			{"body too large", "PUT", "/items/lamp/stock", "11", `{"stock":3,"x":"` + strings.Repeat("a", 2000) + `"}`, 400, service.TypeBadBody, "too large"},
			// No such item: 404, with or without a token.
			{"missing item with token", "GET", "/items/nope", "12", "", 404, service.TypeNoItem, ""},
			{"missing item write", "PUT", "/items/nope/stock", "12", `{"stock":1}`, 404, service.TypeNoItem, ""},
			{"no route", "GET", "/nothing", "", "", 404, service.TypeNoItem, ""},
			{"wrong method", "DELETE", "/items/lamp", "", "", 405, service.TypeNotAllowed, ""},
			// Admin: unfenced, shows the mark, never claims.
			{"admin read", "GET", "/admin/items/lamp", "", "", 200, "", `"high_water":"11"`},
			{"admin read missing", "GET", "/admin/items/nope", "", "", 404, service.TypeNoItem, ""},
			{"admin put bad body", "PUT", "/admin/items/lamp", "", `{"stock":-5}`, 400, service.TypeBadBody, ""},
			{"admin put", "PUT", "/admin/items/lamp", "", `{"stock":9}`, 200, "", `"stock":9`},
			{"admin put keeps mark", "GET", "/admin/items/lamp", "", "", 200, "", `"high_water":"11"`},
		} {
			r := call(t, srv, c.method, c.path, c.tok, c.body)
			if r.status != c.status {
				t.Errorf("%s: status %d, want %d (%s)", c.name, r.status, c.status, r.body)
				continue
			}
			if c.typ != "" {
				if r.ctype != httpmw.ContentType || r.problem.Type != c.typ || r.problem.Status != c.status {
					t.Errorf("%s: %s type %q status %d, want problem type %q", c.name, r.ctype, r.problem.Type, r.problem.Status, c.typ)
				}
			} else if r.ctype != "application/json" {
				t.Errorf("%s: content type %q", c.name, r.ctype)
			}
			if !strings.Contains(r.body, c.want) {
				t.Errorf("%s: body %q lacks %q", c.name, r.body, c.want)
			}
			if c.tok != "" && strings.Contains(r.body, "abc") {
				t.Errorf("%s: body echoes the header: %q", c.name, r.body)
			}
		}
	})
}

// Every spelling of an item's path names one resource, for the middleware
// and the handler alike: a stale holder cannot reach an item unfenced by
// escaping its path so that the two decode it differently ("a%2541" is
// "a%41" to chi and the middleware, and was "aA" to a handler that
// unescaped it once more).
func TestPathSpellingsMeetOneFence(t *testing.T) {
	stores(t, func(t *testing.T, newStore func(*testing.T) service.Store) {
		srv := newServer(t, newStore(t), false)
		call(t, srv, "PUT", "/admin/items/aA", "", `{"stock": 5}`)
		if r := call(t, srv, "PUT", "/items/aA/stock", "20", `{"stock":4}`); r.status != 200 {
			t.Fatalf("write under 20: %d %s", r.status, r.body)
		}
		for _, path := range []string{"/items/a%41/stock", "/items/%61%41/stock", "/items/a%2541/stock"} {
			r := call(t, srv, "PUT", path, "5", `{"stock":1}`)
			if r.status == 200 {
				t.Errorf("PUT %s under stale token 5 accepted: %s", path, r.body)
			}
		}
		if r := call(t, srv, "GET", "/admin/items/aA", "", ""); !strings.Contains(r.body, `"stock":4`) {
			t.Fatalf("aA after stale writes under other spellings: %s", r.body)
		}
	})
}

// The store's own check: a holder the middleware let through is refused
// when the row has seen a higher token (here raised behind the service's
// back), and the client gets the middleware's kind of 409.
func TestStoreRefusesBehindMiddleware(t *testing.T) {
	ctx := context.Background()
	t.Run("postgres", func(t *testing.T) {
		pg := pgserver.Shared(t)
		pool, err := pgxpool.New(ctx, pg.DSN)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		store, err := service.NewPostgresStore(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		refusesBehindMiddleware(t, store, func(q string) error { _, err := pool.Exec(ctx, q); return err })
	})
	t.Run("mysql", func(t *testing.T) {
		store, db := myStore(t)
		refusesBehindMiddleware(t, store, func(q string) error { _, err := db.ExecContext(ctx, q); return err })
	})
}

// refusesBehindMiddleware raises the row's mark with exec and checks the
// service's answer to a lower token.
func refusesBehindMiddleware(t *testing.T, store service.Store, exec func(string) error) {
	ctx := context.Background()
	srv := newServer(t, store, false)
	call(t, srv, "PUT", "/admin/items/lamp", "", `{"stock": 5}`)
	if err := exec(`UPDATE items SET fence_token = 50 WHERE sku = 'lamp'`); err != nil {
		t.Fatal(err)
	}
	r := call(t, srv, "PUT", "/items/lamp/stock", "20", `{"stock":4}`)
	if r.status != 409 || r.problem.Type != httpmw.TypeStale || r.problem.Current != 50 {
		t.Fatalf("write under 20 after the row saw 50: %d %s", r.status, r.body)
	}
	if it, _ := store.Get(ctx, "lamp", 0); it.Stock != 5 {
		t.Fatalf("stock %d after a refused write, want 5", it.Stock)
	}
	metrics := call(t, srv, "GET", "/metrics", "", "").body
	for _, want := range []string{
		`fenceguard_claims_total{class="items",result="stale"} 1`, // the row refused it
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// Unfenced: the same handlers, a plain read and a plain write, whatever the
// header says.
func TestUnfencedIgnoresTokens(t *testing.T) {
	stores(t, func(t *testing.T, newStore func(*testing.T) service.Store) {
		srv := newServer(t, newStore(t), true)
		call(t, srv, "PUT", "/admin/items/lamp", "", `{"stock": 5}`)
		for _, c := range []struct{ tok, stock string }{{"", "4"}, {"10", "3"}, {"9", "2"}, {"garbage", "1"}} {
			r := call(t, srv, "PUT", "/items/lamp/stock", c.tok, `{"stock":`+c.stock+`}`)
			if r.status != 200 {
				t.Errorf("token %q: %d %s", c.tok, r.status, r.body)
			}
		}
		if r := call(t, srv, "GET", "/items/lamp", "1", ""); r.status != 200 || !strings.Contains(r.body, `"stock":1`) {
			t.Errorf("read: %d %s", r.status, r.body)
		}
		if r := call(t, srv, "GET", "/admin/items/lamp", "", ""); strings.Contains(r.body, "high_water") {
			t.Errorf("an unfenced service claimed the item: %s", r.body)
		}
	})
}

func TestHealthAndMetrics(t *testing.T) {
	stores(t, func(t *testing.T, newStore func(*testing.T) service.Store) {
		srv := newServer(t, newStore(t), false)
		if r := call(t, srv, "GET", "/healthz", "", ""); r.status != 200 || r.body != "ok\n" {
			t.Errorf("/healthz: %d %q", r.status, r.body)
		}
		call(t, srv, "PUT", "/admin/items/lamp", "", `{"stock": 5}`)
		call(t, srv, "GET", "/items/lamp", "7", "")
		call(t, srv, "GET", "/items/lamp", "6", "")
		call(t, srv, "GET", "/items/lamp", "18446744073709551615", "")
		r := call(t, srv, "GET", "/metrics", "", "")
		for _, want := range []string{
			`fenceguard_claims_total{class="items",result="accepted"} 1`, // the store's claim
			`fenceguard_claims_total{class="items",result="stale"} 1`,
			`fenceguard_claims_total{class="sku",result="forged"} 1`, // the middleware's check
		} {
			if !strings.Contains(r.body, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	})
}

// The client: a stale refusal comes back as a *token.StaleError, the
// other fencing refusals as an *httpmw.Problem, the service's own as a
// *ProblemError; the token travels from the context.
func TestClient(t *testing.T) {
	srv := newServer(t, service.NewMemoryStore(), false)
	c := &service.Client{Base: srv.URL, HTTP: &http.Client{Transport: &httpmw.Transport{Base: srv.Client().Transport, Key: service.ItemKey}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.AdminPut(ctx, "lamp", 3); err != nil {
		t.Fatal(err)
	}
	it, err := c.SetStock(token.NewContext(ctx, "sku:lamp", 5), "lamp", 2)
	if err != nil || it.Stock != 2 {
		t.Fatalf("SetStock under 5: %+v, %v", it, err)
	}
	_, err = c.Get(token.NewContext(ctx, "sku:lamp", 4), "lamp")
	var stale *token.StaleError
	if !errorsAs(err, &stale) || stale.Current != 5 {
		t.Fatalf("Get under 4 after 5: %v, want a StaleError with current 5", err)
	}
	_, err = c.SetStock(ctx, "lamp", 1) // no token in the context
	var p *httpmw.Problem
	if !errorsAs(err, &p) || p.Status != 428 || p.Type != httpmw.TypeMissing || !errors.Is(err, token.ErrMissing) {
		t.Fatalf("SetStock without a token: %v", err)
	}
	a, err := c.AdminGet(ctx, "lamp")
	if err != nil || a.Stock != 2 || a.HighWater != 5 {
		t.Fatalf("AdminGet: %+v, %v", a, err)
	}
}

func errorsAs[T error](err error, target *T) bool { return errors.As(err, target) }

// POST /items/{sku}/sell, one unit per call, on both stores: sold out is
// its own answer (409 sold-out), a stale holder is refused, a missing item
// is 404, and holders selling at once never oversell.
func TestSell(t *testing.T) {
	stores(t, func(t *testing.T, newStore func(*testing.T) service.Store) {
		store := newStore(t)
		srv := newServer(t, store, false)
		call(t, srv, "PUT", "/admin/items/lamp", "", `{"stock": 2}`)
		for _, c := range []struct {
			name, tok string
			status    int
			typ       string
		}{
			{"without token", "", 428, httpmw.TypeMissing},
			{"sale 1", "10", 204, ""},
			{"sale 2, same holder", "10", 204, ""},
			{"sold out", "10", 409, service.TypeSoldOut},
			{"sold out, newer holder", "11", 409, service.TypeSoldOut},
			{"stale after the newer holder saw it sold out", "10", 409, httpmw.TypeStale},
		} {
			r := call(t, srv, "POST", "/items/lamp/sell", c.tok, "")
			if r.status != c.status || r.problem.Type != c.typ {
				t.Errorf("%s: %d %q, want %d %q (%s)", c.name, r.status, r.problem.Type, c.status, c.typ, r.body)
			}
		}
		if r := call(t, srv, "POST", "/items/nope/sell", "12", ""); r.status != 404 {
			t.Errorf("missing item: %d %s", r.status, r.body)
		}
		if r := call(t, srv, "GET", "/admin/items/lamp", "", ""); !strings.Contains(r.body, `"stock":0`) {
			t.Fatalf("after two sales of two: %s", r.body)
		}

		// 8 holders, one after another in token order but overlapping,
		// through the Client and its Transport: every sale is one unit,
		// and they stop at 0.
		const stock = 30
		call(t, srv, "PUT", "/admin/items/desk", "", `{"stock": 30}`)
		client := &service.Client{Base: srv.URL}
		var clock atomic.Int64
		clock.Store(100)
		var sold atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for {
					ctx := token.NewContext(context.Background(), "sku:desk", token.Token(clock.Add(1)))
					err := client.Sell(ctx, "desk")
					var p *service.ProblemError
					switch {
					case err == nil:
						sold.Add(1)
					case errors.As(err, &p) && p.Type == service.TypeSoldOut:
						return
					case errors.Is(err, token.ErrStale):
						// overtaken by a newer holder: take a new token
					default:
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if r := call(t, srv, "GET", "/admin/items/desk", "", ""); sold.Load() != stock || !strings.Contains(r.body, `"stock":0`) {
			t.Fatalf("sold %d of %d, item now %s", sold.Load(), stock, r.body)
		}

		// Unfenced: the plain statement, no token.
		plain := newServer(t, store, true)
		call(t, plain, "PUT", "/admin/items/chair", "", `{"stock": 1}`)
		for i, want := range []int{204, 409, 404} {
			path := "/items/chair/sell"
			if i == 2 {
				path = "/items/nope/sell"
			}
			if r := call(t, plain, "POST", path, "", ""); r.status != want {
				t.Errorf("unfenced sale %d: %d, want %d (%s)", i+1, r.status, want, r.body)
			}
		}
	})
}
