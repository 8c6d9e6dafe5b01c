package httpmw_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/harness/pgserver"
	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// shop is the strong setup end to end: the middleware claims the resource
// in the PostgreSQL Fence, and the handler reads and writes the row through
// the column-mode enforcer with the token from the request context, served
// by two "processes" (two servers) sharing the database.
type shop struct {
	pool    *pgxpool.Pool
	items   *postgres.Table
	fence   *postgres.Fence
	urls    []string
	client  *http.Client
	pauseMu sync.Mutex
	pause   map[token.Token]chan struct{} // a sale with this token waits between read and write
	reading chan token.Token              // paused sales report here once they have read
	plain   bool                          // the control: write with plain SQL, no enforcer
}

func newShop(t *testing.T, stock int) *shop {
	t.Helper()
	pg := pgserver.Shared(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE items (id bigint PRIMARY KEY, stock int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	items, err := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id", LockKey: postgres.LockKeyPrefix("sku:")})
	if err != nil {
		t.Fatal(err)
	}
	if err := items.AddTokenColumn(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO items (id, stock) VALUES (42, $1)`, stock); err != nil {
		t.Fatal(err)
	}
	s := &shop{pool: pool, items: items, fence: postgres.NewFence(pool),
		pause: map[token.Token]chan struct{}{}, reading: make(chan token.Token, 1)}
	var transport http.RoundTripper
	for range 2 {
		mw := newMW(t, httpmw.Options{Resource: httpmw.ChiParam("sku"), Fence: s.fence})
		r := chi.NewRouter()
		r.With(mw.Handler).Post("/sku/{sku}/sell", s.sell)
		srv := httptest.NewServer(r)
		t.Cleanup(srv.Close)
		s.urls = append(s.urls, srv.URL)
		transport = srv.Client().Transport // both clients are plain; either will do
	}
	s.client = &http.Client{Transport: &httpmw.Transport{Base: transport, Key: mustRouteKey("sku", "/sku/{sku}/sell")}}
	t.Cleanup(s.client.CloseIdleConnections)
	return s
}

// sell is the handler: read the stock (claiming the row), maybe pause,
// write it back less one. The token comes from the context (token 0).
func (s *shop) sell(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id, err := strconv.ParseInt(chi.URLParam(r, "sku"), 10, 64)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	var stock int
	if err := s.items.Read(ctx, s.pool, id, 0, []string{"stock"}, &stock); err != nil {
		s.fail(w, err)
		return
	}
	_, tok, _ := token.FromContext(ctx)
	s.pauseMu.Lock()
	wait := s.pause[tok]
	s.pauseMu.Unlock()
	if wait != nil {
		s.reading <- tok
		<-wait // the holder is paused here, between its read and its write
	}
	if stock == 0 {
		http.Error(w, "sold out", http.StatusConflict)
		return
	}
	if s.plain {
		if _, err := s.pool.Exec(ctx, `UPDATE items SET stock = $1 WHERE id = $2`, stock-1, id); err != nil {
			s.fail(w, err)
			return
		}
	} else if err := s.items.Update(ctx, s.pool, id, 0, postgres.Set("stock", stock-1)); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *shop) fail(w http.ResponseWriter, err error) {
	if httpmw.WriteStale(w, err) {
		return
	}
	http.Error(w, "store error", http.StatusInternalServerError)
}

// buy sends one sale to server i under token tok, through the Transport.
func (s *shop) buy(i int, tok token.Token) (int, error) {
	ctx := token.NewContext(context.Background(), "sku:42", tok)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.urls[i]+"/sku/42/sell", nil)
	if err != nil {
		return 0, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func (s *shop) stock(t *testing.T) (stock int, mark int64) {
	t.Helper()
	err := s.pool.QueryRow(context.Background(), `SELECT stock, fence_token FROM items WHERE id = 42`).Scan(&stock, &mark)
	if err != nil {
		t.Fatal(err)
	}
	return stock, mark
}

// A holder paused between its read and its write passed the middleware
// long before its write; the store refuses the write, and the client gets
// the StaleError. Then the middleware refuses the holder up front.
func TestPostgresPausedHolder(t *testing.T) {
	s := newShop(t, 10)
	release := make(chan struct{})
	s.pause[100] = release

	var wg sync.WaitGroup
	var aStatus int
	var aErr error
	wg.Go(func() { aStatus, aErr = s.buy(0, 100) })
	if got := <-s.reading; got != 100 {
		t.Fatalf("paused %d", got)
	}
	// Holder A's lease expired; B got the lock with 101 and sells on the
	// other process.
	if code, err := s.buy(1, 101); err != nil || code != http.StatusNoContent {
		t.Fatalf("B: %d, %v", code, err)
	}
	close(release) // A wakes up and writes
	wg.Wait()

	var stale *token.StaleError
	if !errors.As(aErr, &stale) || stale.Presented != 100 || stale.Current != 101 {
		t.Fatalf("A: status %d, err %v; want the store's StaleError, current 101", aStatus, aErr)
	}
	if stock, mark := s.stock(t); stock != 9 || mark != 101 {
		t.Errorf("stock %d (mark %d), want 9 (101): one sale", stock, mark)
	}
	// A retries: now the middleware refuses it before the handler runs.
	if _, err := s.buy(0, 100); !errors.As(err, &stale) || stale.Current != 101 || stale.Resource != "sku:42" {
		t.Errorf("A again: %v, want the middleware's StaleError for sku:42", err)
	}
	// Tokens beyond PostgreSQL's bigint are far above the clock too: the
	// default check refuses them as forged before the store sees them,
	// and nothing changes. (Past a check that lets them through, the
	// store's refusal is a 400: TestFenceRefusesOutOfRangeToken.)
	for _, v := range []string{"9223372036854775808", "18446744073709551615"} {
		req, _ := http.NewRequest(http.MethodPost, s.urls[0]+"/sku/42/sell", nil)
		req.Header.Set(token.Header, v)
		code, err := status(s.client.Do(req))
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusForbidden {
			t.Errorf("token %s: status %d, want 403", v, code)
		}
	}
	if hw, err := s.fence.HighWater(context.Background(), "sku:42"); err != nil || hw != 101 {
		t.Errorf("fence high-water %d, %v; want 101", hw, err)
	}
}

// The control: the same pause with the middleware alone (the handler
// writes with plain SQL) sells two units and takes one off the stock —
// the race the package doc warns about, and what the enforcer prevents.
func TestPostgresPausedHolderWithoutEnforcer(t *testing.T) {
	s := newShop(t, 10)
	s.plain = true
	release := make(chan struct{})
	s.pause[100] = release
	var wg sync.WaitGroup
	var aStatus int
	var aErr error
	wg.Go(func() { aStatus, aErr = s.buy(0, 100) })
	<-s.reading
	if code, err := s.buy(1, 101); err != nil || code != http.StatusNoContent {
		t.Fatalf("B: %d, %v", code, err)
	}
	close(release)
	wg.Wait()
	if aErr != nil || aStatus != http.StatusNoContent {
		t.Fatalf("A: %d, %v; the control expects the stale write to land", aStatus, aErr)
	}
	if stock, _ := s.stock(t); stock != 9 {
		t.Errorf("stock %d; the control expects 9: two sales, one unit taken", stock)
	}
}

// Concurrent sales with distinct, roughly rising tokens (holders
// overtaking each other) over two processes: every
// accepted sale took exactly one unit (no lost update, no stale write), and
// the row's mark is the largest token that sold.
func TestPostgresConcurrentSales(t *testing.T) {
	const stock, sales = 1000, 60
	s := newShop(t, stock)
	var sold atomic.Int64
	var highest atomic.Uint64
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for i := w; i < sales; i += 6 {
				tok := token.Token(1000 + 4*i + rand.IntN(4))
				code, err := s.buy(i%2, tok)
				var stale *token.StaleError
				switch {
				case err == nil && code == http.StatusNoContent:
					sold.Add(1)
					maxStore(&highest, uint64(tok))
				case errors.As(err, &stale):
					if stale.Current <= tok {
						t.Errorf("token %d refused with current %d", tok, stale.Current)
					}
				default:
					t.Errorf("token %d: status %d, err %v", tok, code, err)
				}
			}
		})
	}
	wg.Wait()
	left, mark := s.stock(t)
	t.Logf("%d of %d sales accepted", sold.Load(), sales)
	if left != stock-int(sold.Load()) {
		t.Errorf("stock %d after %d accepted sales of %d: lost or extra updates", left, sold.Load(), stock)
	}
	if uint64(mark) != highest.Load() {
		t.Errorf("row mark %d, largest accepted token %d", mark, highest.Load())
	}
}
