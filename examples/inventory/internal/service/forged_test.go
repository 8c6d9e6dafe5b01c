package service_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fenceguard/fenceguard/examples/inventory/internal/service"
	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/token"
)

// newFencedServer is newServer with the holders' lock service as the
// sequencer (memlock stands in for it: every locker answers alike).
func newFencedServer(t *testing.T, store service.Store, seq token.Sequencer) *httptest.Server {
	t.Helper()
	h, err := service.New(service.Options{Store: store, Registry: prometheus.NewRegistry(),
		Logger: slog.New(slog.DiscardHandler), Sequencer: seq})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// A client that is no holder presents made-up tokens while an honest holder
// sells: far above the clock, and just above the holder's token (under the
// clock bound, so only the lock service can tell). Both are refused with
// 403 before they touch anything, the holder keeps selling, and no mark
// moved. The control — the same service without the sequencer — lets the
// token just above the holder in, and the holder is then locked out.
func TestMadeUpTokensRefused(t *testing.T) {
	stores(t, func(t *testing.T, newStore func(*testing.T) service.Store) {
		for _, withSeq := range []bool{true, false} {
			t.Run(map[bool]string{true: "sequencer", false: "control"}[withSeq], func(t *testing.T) {
				locker := memlock.New()
				var seq token.Sequencer
				if withSeq {
					seq = locker
				}
				store := newStore(t)
				srv := newFencedServer(t, store, seq)
				if r := call(t, srv, "PUT", "/admin/items/lamp", "", `{"stock": 5}`); r.status != 200 {
					t.Fatalf("seeding: %d %s", r.status, r.body)
				}
				ctx := context.Background()
				lease, err := locker.Acquire(ctx, "sku:lamp", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				defer lease.Release(ctx)
				holder := lease.Token().String()
				if r := call(t, srv, "GET", "/items/lamp", holder, ""); r.status != 200 {
					t.Fatalf("the holder's read: %d %s", r.status, r.body)
				}
				far := strconv.FormatUint(1<<62, 10)
				if r := call(t, srv, "PUT", "/items/lamp/stock", far, `{"stock": 0}`); r.status != 403 || r.problem.Type != httpmw.TypeForged {
					t.Fatalf("a token far above the clock: %d %s", r.status, r.body)
				}
				above := (lease.Token() + 1).String()
				r := call(t, srv, "PUT", "/items/lamp/stock", above, `{"stock": 0}`)
				if withSeq && (r.status != 403 || r.problem.Type != httpmw.TypeForged) {
					t.Fatalf("a token just above the holder's: %d %s, want 403", r.status, r.body)
				}
				if !withSeq && r.status != 200 {
					t.Fatalf("control: a token just above the holder's: %d %s, want it accepted", r.status, r.body)
				}
				r = call(t, srv, "PUT", "/items/lamp/stock", holder, `{"stock": 4}`)
				switch {
				case withSeq && r.status != 200:
					t.Fatalf("the honest holder was locked out: %d %s", r.status, r.body)
				case !withSeq && r.status != 409:
					t.Fatalf("control: the honest holder after the forger: %d %s, want 409 (locked out)", r.status, r.body)
				}
				if withSeq {
					if mark, err := store.HighWater(ctx, "lamp"); err != nil || mark != lease.Token() {
						t.Errorf("mark %d, %v; want the holder's %d", mark, err, lease.Token())
					}
				}
			})
		}
	})
}

// An operator sets a poisoned mark back with the admin route, by default to
// the current grant's token: the holder gets through again, an older token
// is still refused, and the other items' marks did not move.
func TestResetMark(t *testing.T) {
	stores(t, func(t *testing.T, newStore func(*testing.T) service.Store) {
		locker := memlock.New()
		store := newStore(t)
		srv := newFencedServer(t, store, locker)
		for _, sku := range []string{"lamp", "desk"} {
			if r := call(t, srv, "PUT", "/admin/items/"+sku, "", `{"stock": 5}`); r.status != 200 {
				t.Fatalf("seeding: %d %s", r.status, r.body)
			}
		}
		ctx := context.Background()
		lease, err := locker.Acquire(ctx, "sku:lamp", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(ctx)
		old := lease.Token() - 1
		if r := call(t, srv, "GET", "/items/lamp", old.String(), ""); r.status != 200 {
			t.Fatalf("an older holder's read: %d %s", r.status, r.body)
		}
		// The poison: a mark the clock bound would refuse today, planted
		// straight in the store, as a forged token before the checks did.
		poison := token.Token(time.Now().Add(time.Hour).UnixMicro())
		if _, err := store.ResetMark(ctx, "desk", poison); err != nil {
			t.Fatal(err)
		}
		if _, err := store.ResetMark(ctx, "lamp", poison); err != nil {
			t.Fatal(err)
		}
		if r := call(t, srv, "GET", "/items/lamp", lease.Token().String(), ""); r.status != 409 {
			t.Fatalf("poisoned: the holder's read %d %s, want 409", r.status, r.body)
		}
		r := call(t, srv, "POST", "/admin/items/lamp/reset-mark", "", "")
		if r.status != 200 {
			t.Fatalf("reset: %d %s", r.status, r.body)
		}
		if want := `"from":"` + poison.String() + `","to":"` + lease.Token().String() + `"`; !strings.Contains(r.body, want) {
			t.Errorf("reset answered %s, want %s", r.body, want)
		}
		if r := call(t, srv, "PUT", "/items/lamp/stock", lease.Token().String(), `{"stock": 4}`); r.status != 200 {
			t.Fatalf("after the reset, the holder's write: %d %s", r.status, r.body)
		}
		if r := call(t, srv, "GET", "/items/lamp", old.String(), ""); r.status != 409 {
			t.Fatalf("after the reset, an older token: %d %s, want 409", r.status, r.body)
		}
		if mark, err := store.HighWater(ctx, "desk"); err != nil || mark != poison {
			t.Errorf("desk's mark %d, %v; the reset of lamp moved it (want %d)", mark, err, poison)
		}
		// Named by hand, and refused for what is not an item or not a mark.
		if r := call(t, srv, "POST", "/admin/items/desk/reset-mark", "", `{"to": "7"}`); r.status != 200 {
			t.Fatalf("reset to a named mark: %d %s", r.status, r.body)
		}
		for _, c := range []struct{ path, body string }{
			{"/admin/items/nope/reset-mark", ""},
			{"/admin/items/desk/reset-mark", `{"to": "0"}`},
			{"/admin/items/desk/reset-mark", `{"to": "x"}`},
			{"/admin/items/desk/reset-mark", `{"to": "7", "all": true}`},
		} {
			if r := call(t, srv, "POST", c.path, "", c.body); r.status != 404 && r.status != 400 {
				t.Errorf("POST %s %s: %d %s, want a 4xx", c.path, c.body, r.status, r.body)
			}
		}
		if mark, err := store.HighWater(ctx, "desk"); err != nil || mark != 7 {
			t.Errorf("desk's mark %d, %v after refused resets, want 7", mark, err)
		}
	})
}
