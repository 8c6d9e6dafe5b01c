package service_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fenceguard/fenceguard/examples/inventory/internal/service"
	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/token"
)

// countingStore counts the fenced accesses that reach the store.
type countingStore struct {
	service.Store
	fenced atomic.Int64
}

func (s *countingStore) Get(ctx context.Context, sku string, t token.Token) (service.Item, error) {
	if !t.IsZero() {
		s.fenced.Add(1)
	}
	return s.Store.Get(ctx, sku, t)
}

func (s *countingStore) SetStock(ctx context.Context, sku string, stock int, t token.Token) (service.Item, error) {
	if !t.IsZero() {
		s.fenced.Add(1)
	}
	return s.Store.SetStock(ctx, sku, stock, t)
}

func (s *countingStore) Sell(ctx context.Context, sku string, t token.Token) error {
	if !t.IsZero() {
		s.fenced.Add(1)
	}
	return s.Store.Sell(ctx, sku, t)
}

func newServerTTL(t *testing.T, store service.Store, ttl time.Duration) *httptest.Server {
	t.Helper()
	h, err := service.New(service.Options{Store: store, Registry: prometheus.NewRegistry(),
		Logger: slog.New(slog.DiscardHandler), MarkCacheTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// A token below a mark the store reported is refused in the process, with
// the store's own 409, and costs the store nothing; with the cache off
// (the control) the same request reaches the store. A token the cache lets
// through is still the store's to refuse: another instance raised the mark
// past what this one knows.
func TestMarkCache(t *testing.T) {
	stores(t, func(t *testing.T, newStore func(*testing.T) service.Store) {
		shared := newStore(t)
		for _, c := range []struct {
			name       string
			ttl        time.Duration
			wantCached bool
		}{{"cache", time.Minute, true}, {"control, cache off", -1, false}} {
			t.Run(c.name, func(t *testing.T) {
				sku := "mc-" + t.Name()[len(t.Name())-3:]
				store := &countingStore{Store: shared}
				a := newServerTTL(t, store, c.ttl)
				b := newServerTTL(t, shared, -1) // another instance over the same store
				if r := call(t, a, "PUT", "/admin/items/"+sku, "", `{"stock": 100}`); r.status != 200 {
					t.Fatalf("seeding: %d %s", r.status, r.body)
				}
				if r := call(t, a, "POST", "/items/"+sku+"/sell", "100", ""); r.status != 204 {
					t.Fatalf("sell with 100: %d %s", r.status, r.body)
				}
				before := store.fenced.Load()
				for _, path := range []string{"/items/" + sku + "/sell", "/items/" + sku} {
					method := "POST"
					if path == "/items/"+sku {
						method = "GET"
					}
					r := call(t, a, method, path, "99", "")
					if r.status != 409 || r.problem.Type != httpmw.TypeStale || r.problem.Current != 100 || r.problem.Presented != 99 {
						t.Fatalf("%s %s with 99 after 100: %d %+v", method, path, r.status, r.problem)
					}
				}
				reached := store.fenced.Load() - before
				if c.wantCached && reached != 0 {
					t.Errorf("%d stale requests reached the store; the cache should have refused them", reached)
				}
				if !c.wantCached && reached != 2 {
					t.Errorf("control: %d of 2 stale requests reached the store", reached)
				}
				// b raises the mark to 200; a knows 100 and lets 150
				// through, and the store refuses it.
				if r := call(t, b, "POST", "/items/"+sku+"/sell", "200", ""); r.status != 204 {
					t.Fatalf("b's sell with 200: %d %s", r.status, r.body)
				}
				if r := call(t, a, "POST", "/items/"+sku+"/sell", "150", ""); r.status != 409 || r.problem.Current != 200 {
					t.Fatalf("a's sell with 150 after b's 200: %d %+v", r.status, r.problem)
				}
				// The refusal taught a 200: 199 no longer reaches the store.
				before = store.fenced.Load()
				if r := call(t, a, "POST", "/items/"+sku+"/sell", "199", ""); r.status != 409 || r.problem.Current != 200 {
					t.Fatalf("a's sell with 199: %d %+v", r.status, r.problem)
				}
				if got := store.fenced.Load() - before; c.wantCached && got != 0 {
					t.Errorf("199 after a stale answer naming 200 reached the store")
				}
				// A reset through a forgets its entry at once.
				if r := call(t, a, "POST", "/admin/items/"+sku+"/reset-mark", "", `{"to": "150"}`); r.status != 200 {
					t.Fatalf("reset: %d %s", r.status, r.body)
				}
				if r := call(t, a, "POST", "/items/"+sku+"/sell", "160", ""); r.status != 204 {
					t.Fatalf("sell with 160 after the reset through this instance: %d %+v", r.status, r.problem)
				}
			})
		}
	})
}

// After a reset through another instance, this one refuses tokens between
// the new mark and the old for at most its TTL, then asks the store again.
func TestMarkCacheResetElsewhere(t *testing.T) {
	stores(t, func(t *testing.T, newStore func(*testing.T) service.Store) {
		shared := newStore(t)
		const ttl = 200 * time.Millisecond
		a := newServerTTL(t, shared, ttl)
		b := newServerTTL(t, shared, -1)
		if r := call(t, a, "PUT", "/admin/items/lamp", "", `{"stock": 100}`); r.status != 200 {
			t.Fatalf("seeding: %d %s", r.status, r.body)
		}
		if r := call(t, a, "POST", "/items/lamp/sell", "1000", ""); r.status != 204 {
			t.Fatalf("sell with 1000: %d %s", r.status, r.body)
		}
		learned := time.Now()
		if r := call(t, b, "POST", "/admin/items/lamp/reset-mark", "", `{"to": "10"}`); r.status != 200 {
			t.Fatalf("reset through b: %d %s", r.status, r.body)
		}
		if r := call(t, b, "POST", "/items/lamp/sell", "20", ""); r.status != 204 {
			t.Fatalf("b sells with 20 after its reset: %d %+v", r.status, r.problem)
		}
		// a still believes 1000 (unless the TTL passed already).
		if r := call(t, a, "POST", "/items/lamp/sell", "30", ""); r.status == 204 {
			if time.Since(learned) < ttl {
				t.Fatalf("a accepted 30 within the TTL of its mark 1000: the cache did not answer")
			}
		} else if r.status != 409 || r.problem.Current != 1000 {
			t.Fatalf("a with 30: %d %+v", r.status, r.problem)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			r := call(t, a, "POST", "/items/lamp/sell", "40", "")
			if r.status == 204 {
				if time.Since(learned) < ttl {
					t.Fatalf("accepted before the TTL ran out")
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a still refuses 40 %v after the reset: %d %+v", time.Since(learned), r.status, r.problem)
			}
			time.Sleep(ttl / 4)
		}
	})
}

// heldStore holds back the answer of the first fenced Sell after hold:
// the store has decided, the handler has not heard yet.
type heldStore struct {
	service.Store
	mu      sync.Mutex
	asked   chan struct{} // closed when the held Sell has the store's answer
	release chan struct{}
}

func (s *heldStore) hold() (asked <-chan struct{}, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked, s.release = make(chan struct{}), make(chan struct{})
	return s.asked, func() { close(s.release) }
}

func (s *heldStore) Sell(ctx context.Context, sku string, t token.Token) error {
	err := s.Store.Sell(ctx, sku, t)
	s.mu.Lock()
	asked, release := s.asked, s.release
	s.asked = nil
	s.mu.Unlock()
	if asked != nil {
		close(asked)
		<-release
	}
	return err
}

// A request in flight on the instance a reset goes through: the store
// answered it (stale, the poisoned mark 1000) before the reset, the
// handler hears after. That answer is from before the reset and is not
// kept: the honest holder the reset was for gets through at once, not
// after the cache's TTL.
func TestMarkCacheResetDuringRequest(t *testing.T) {
	stores(t, func(t *testing.T, newStore func(*testing.T) service.Store) {
		shared := newStore(t)
		store := &heldStore{Store: shared}
		a := newServerTTL(t, store, time.Hour)
		b := newServerTTL(t, shared, -1)
		if r := call(t, b, "PUT", "/admin/items/lamp", "", `{"stock": 100}`); r.status != 200 {
			t.Fatalf("seeding: %d %s", r.status, r.body)
		}
		if r := call(t, b, "POST", "/items/lamp/sell", "1000", ""); r.status != 204 { // the poisoned mark
			t.Fatalf("sell with 1000: %d %s", r.status, r.body)
		}
		asked, release := store.hold()
		inFlight := make(chan int, 1)
		go func() {
			req, _ := http.NewRequest("POST", a.URL+"/items/lamp/sell", nil)
			req.Header.Set(token.Header, "20")
			resp, err := a.Client().Do(req)
			if err != nil {
				inFlight <- 0
				return
			}
			resp.Body.Close()
			inFlight <- resp.StatusCode
		}()
		<-asked // the store has refused 20 against 1000
		if r := call(t, a, "POST", "/admin/items/lamp/reset-mark", "", `{"to": "10"}`); r.status != 200 {
			t.Fatalf("reset through a: %d %s", r.status, r.body)
		}
		release()
		if got := <-inFlight; got != 409 {
			t.Fatalf("the request in flight: %d, want the store's 409 from before the reset", got)
		}
		if r := call(t, a, "POST", "/items/lamp/sell", "20", ""); r.status != 204 {
			t.Errorf("sell with 20 after the reset to 10 through this instance: %d %+v (a stale answer from before the reset was cached)", r.status, r.problem)
		}
	})
}
