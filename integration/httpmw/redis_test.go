package httpmw_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/token"
)

func redisClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// The Redis Fence behind the middleware, over real HTTP with the client
// Transport: accept, accept again, refuse the stale holder with the
// current mark, refuse hostile input without touching Redis's mark.
func TestRedisFence(t *testing.T) {
	db := redisserver.Shared(t)
	fence := redislock.NewFence(redisClient(t, db.Addr), redislock.FenceOptions{Prefix: db.Prefix})
	mw := newMW(t, httpmw.Options{Resource: httpmw.PathValue("sku"), Fence: fence})
	var s seen
	mux := http.NewServeMux()
	mux.Handle("PUT /sku/{sku}", mw.Handler(s.handler()))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := &http.Client{Transport: &httpmw.Transport{Base: srv.Client().Transport, Key: skuKey}}
	ctx := context.Background()

	put := func(tok token.Token) error {
		req, _ := http.NewRequestWithContext(token.NewContext(ctx, "sku:42", tok), http.MethodPut, srv.URL+"/sku/42", nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("token %d: status %d", tok, resp.StatusCode)
		}
		return nil
	}
	for _, tok := range []token.Token{7, 7, 9} {
		if err := put(tok); err != nil {
			t.Fatalf("token %d: %v", tok, err)
		}
	}
	var stale *token.StaleError
	if err := put(8); !errors.As(err, &stale) || stale.Current != 9 || stale.Presented != 8 {
		t.Fatalf("token 8 after 9: err %v, want stale with current 9", err)
	}
	for _, hostile := range []string{"18446744073709551616", "09", "-9", "9 ", "٩"} {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/sku/42", nil)
		req.Header.Set(token.Header, hostile)
		code, err := status(client.Do(req))
		if err != nil {
			t.Fatal(err)
		}
		// "9 " loses its blank on the wire and is token 9, equal to the mark.
		if want := map[bool]int{true: 204, false: 400}[hostile == "9 "]; code != want {
			t.Errorf("%q: status %d, want %d", hostile, code, want)
		}
	}
	if hw, err := fence.HighWater(ctx, "sku:42"); err != nil || hw != 9 {
		t.Errorf("high-water %d, %v; want 9", hw, err)
	}
}

// Several middleware instances (several resource processes) share one
// Redis Fence: the claims are still ordered.
func TestRedisFenceConcurrentProcesses(t *testing.T) {
	db := redisserver.Shared(t)
	const procs, keys, perWorker = 3, 3, 60
	c := &orderChecker{t: t, done: make([]atomic.Uint64, keys)}
	handlers := make([]http.Handler, procs)
	for i := range handlers {
		fence := redislock.NewFence(redisClient(t, db.Addr), redislock.FenceOptions{Prefix: db.Prefix})
		mw := newMW(t, httpmw.Options{Resource: httpmw.ChiParam("sku"), Fence: fence})
		handlers[i] = c.wrap(mw, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	}
	var next [keys]atomic.Uint64
	var accepted atomic.Int64
	var wg sync.WaitGroup
	for i := range procs * 2 {
		wg.Go(func() {
			for range perWorker {
				k := rand.IntN(keys)
				tok := max(1, int64(next[k].Add(1))-rand.Int64N(8))
				w := serve(t, handlers[i%procs], http.MethodPut, "/sku/"+strconv.Itoa(k), strconv.FormatInt(tok, 10))
				switch w.Code {
				case http.StatusOK:
					accepted.Add(1)
				case http.StatusConflict:
				default:
					t.Errorf("status %d: %s", w.Code, w.Body)
				}
			}
		})
	}
	wg.Wait()
	fence := redislock.NewFence(redisClient(t, db.Addr), redislock.FenceOptions{Prefix: db.Prefix})
	for k := range keys {
		hw, err := fence.HighWater(context.Background(), "sku:"+strconv.Itoa(k))
		if err != nil || uint64(hw) != c.done[k].Load() {
			t.Errorf("sku:%d: high-water %d (%v), highest accepted %d", k, hw, err, c.done[k].Load())
		}
	}
	if accepted.Load() == 0 {
		t.Error("nothing accepted")
	}
}

// A Redis Fence that cannot reach Redis refuses every token request with
// 503 and never lets one through; tokenless reads still pass.
func TestRedisUnreachableFailsClosed(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	fence := redislock.NewFence(redisClient(t, addr), redislock.FenceOptions{})
	var s seen
	h := chiRoute(newMW(t, httpmw.Options{Resource: httpmw.ChiParam("sku"), Fence: fence}), s.handler())
	for _, method := range []string{http.MethodPut, http.MethodGet} {
		w := serve(t, h, method, "/sku/42", "7")
		if p := decodeProblem(t, w, http.StatusServiceUnavailable); p.Type != httpmw.TypeUnavailable {
			t.Errorf("%s: problem %+v", method, p)
		}
	}
	if s.calls.Load() != 0 {
		t.Error("handler called without a check")
	}
	if w := serve(t, h, http.MethodGet, "/sku/42"); w.Code != http.StatusNoContent {
		t.Errorf("tokenless GET: status %d", w.Code)
	}
}

// The default check against real redislock tokens: they are floored by
// the Redis server's clock in µs, so the holder's token passes the clock
// bound, and a made-up token far above it is refused before it reaches
// the Redis Fence.
func TestRedisDefaultCheck(t *testing.T) {
	db := redisserver.Shared(t)
	c := redisClient(t, db.Addr)
	locker, err := redislock.New(c, redislock.Options{Prefix: db.Prefix + "lock:"})
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	ctx := context.Background()
	lease, err := locker.Acquire(ctx, "sku:42", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)

	fence := redislock.NewFence(c, redislock.FenceOptions{Prefix: db.Prefix + "fence:"})
	h := chiRoute(newMW(t, httpmw.Options{Resource: httpmw.ChiParam("sku"), Fence: fence}), new(seen).handler())
	if w := serve(t, h, http.MethodPut, "/sku/42", lease.Token().String()); w.Code != http.StatusNoContent {
		t.Fatalf("holder: status %d: %s", w.Code, w.Body)
	}
	// Far above anything granted, including the clock floor (µs since 1970).
	forged := (lease.Token() + 1) * 1000
	if p := decodeProblem(t, serve(t, h, http.MethodPut, "/sku/42", forged.String()), http.StatusForbidden); p.Type != httpmw.TypeForged {
		t.Errorf("forger: problem %+v", p)
	}
	if hw, err := fence.HighWater(ctx, "sku:42"); err != nil || hw != lease.Token() {
		t.Errorf("high-water %d, %v; want the holder's %d", hw, err, lease.Token())
	}
}

// The sequencer check against real redislock grants: a token just above
// the current holder's — under the clock bound, so only the lock service
// can tell it was never granted — is refused, the holder's is accepted,
// and the resource needs only a plain client to ask.
func TestRedisSequencerCheck(t *testing.T) {
	db := redisserver.Shared(t)
	c := redisClient(t, db.Addr)
	locker, err := redislock.New(c, redislock.Options{Prefix: db.Prefix + "lock:"})
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	ctx := context.Background()
	lease, err := locker.Acquire(ctx, "sku:42", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)

	fence := redislock.NewFence(c, redislock.FenceOptions{Prefix: db.Prefix + "fence:"})
	check := token.All(token.ClockBound{}, token.SequencerCheck(redislock.NewSequencer(c, db.Prefix+"lock:"), token.SequencerOptions{}))
	h := chiRoute(newMW(t, httpmw.Options{Resource: httpmw.ChiParam("sku"), Fence: fence, Check: check}), new(seen).handler())
	if p := decodeProblem(t, serve(t, h, http.MethodPut, "/sku/42", (lease.Token()+1).String()), http.StatusForbidden); p.Type != httpmw.TypeForged {
		t.Errorf("forger just above the holder: problem %+v", p)
	}
	if w := serve(t, h, http.MethodPut, "/sku/42", lease.Token().String()); w.Code != http.StatusNoContent {
		t.Fatalf("holder: status %d: %s", w.Code, w.Body)
	}
	if hw, err := fence.HighWater(ctx, "sku:42"); err != nil || hw != lease.Token() {
		t.Errorf("high-water %d, %v; want the holder's %d", hw, err, lease.Token())
	}
}
