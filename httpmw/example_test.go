package httpmw_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/token"
)

// send is the examples' client: one request through h, its status and,
// for refusals, the problem type's last word.
func send(h http.Handler, method, target, tok string) string {
	r := httptest.NewRequest(method, target, nil)
	if tok != "" {
		r.Header.Set(token.Header, tok)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code < 400 {
		return fmt.Sprint(w.Code)
	}
	var typ string
	if _, after, ok := strings.Cut(w.Body.String(), `"type":"`); ok {
		typ, _, _ = strings.Cut(after, `"`)
		_, typ, _ = strings.Cut(typ, "#")
	}
	return fmt.Sprint(w.Code, " ", typ)
}

// The middleware on the standard library's mux: the key comes from the
// route's {sku} wildcard, the high-water marks live in a MemoryFence.
func ExampleNew() {
	var fence token.MemoryFence
	mw, err := httpmw.New(httpmw.Options{
		Resource: httpmw.PathValue("sku"),
		Fence:    &fence,
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("PUT /sku/{sku}", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, t, _ := token.FromContext(r.Context()) // what the middleware accepted
		fmt.Printf("  handler: %s under token %d\n", key, t)
		w.WriteHeader(http.StatusNoContent)
	})))

	fmt.Println("holder 7:", send(mux, "PUT", "/sku/42", "7"))
	fmt.Println("holder 8:", send(mux, "PUT", "/sku/42", "8"))
	fmt.Println("holder 7, woken from a pause:", send(mux, "PUT", "/sku/42", "7"))
	fmt.Println("no token:", send(mux, "PUT", "/sku/42", ""))
	fmt.Println("malformed:", send(mux, "PUT", "/sku/42", "008"))
	// Output:
	//   handler: sku:42 under token 7
	// holder 7: 204
	//   handler: sku:42 under token 8
	// holder 8: 204
	// holder 7, woken from a pause: 409 stale-token
	// no token: 428 missing-token
	// malformed: 400 invalid-token
}

// The client side: the Transport sends the token of the lease in the
// request's context (guard.Do's function context carries it) to the
// resource it was granted for, and only there; a stale refusal comes back
// from http.Client.Do as a *token.StaleError.
func ExampleTransport() {
	var fence token.MemoryFence
	mw, err := httpmw.New(httpmw.Options{Resource: httpmw.PathValue("sku"), Fence: &fence})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/sku/{sku}", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, t, _ := token.FromContext(r.Context())
		fmt.Printf("  %s %s, token %d\n", r.Method, r.URL.Path, t)
		w.WriteHeader(http.StatusNoContent)
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	// The client maps requests to lock keys the way the server does.
	key, err := httpmw.RouteKey("sku", "/sku/{sku}")
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: &httpmw.Transport{Base: srv.Client().Transport, Key: key}}
	send := func(ctx context.Context, method, path string) error {
		req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		fmt.Println("status:", resp.StatusCode)
		return nil
	}

	// Here the contexts are made by hand; in a holder they come from
	// guard.Do or a lease's Context.
	ctx := context.Background()
	holder := token.NewContext(ctx, "sku:42", 8)
	_ = send(holder, "PUT", "/sku/42") // carries 8
	_ = send(holder, "GET", "/sku/43") // another resource: no token
	err = send(token.NewContext(ctx, "sku:42", 7), "PUT", "/sku/42")
	var stale *token.StaleError
	if errors.As(err, &stale) {
		fmt.Printf("lock lost on %s: presented %d, resource has seen %d\n", stale.Resource, stale.Presented, stale.Current)
	}
	// Output:
	//   PUT /sku/42, token 8
	// status: 204
	//   GET /sku/43, token 0
	// status: 204
	// lock lost on sku:42: presented 7, resource has seen 8
}

// RouteKey maps a request to the lock key its resource is guarded by,
// unescaping as the server does; requests for other routes map to none.
func ExampleRouteKey() {
	key, err := httpmw.RouteKey("sku", "inventory.internal/items/{sku}", "inventory.internal/items/{sku}/stock")
	if err != nil {
		log.Fatal(err)
	}
	for _, u := range []string{
		"http://inventory.internal/items/lamp/stock",
		"http://inventory.internal/items/%6Camp",
		"http://inventory.internal/admin/items/lamp",
		"http://elsewhere.example/items/lamp",
	} {
		req, _ := http.NewRequest(http.MethodPut, u, nil)
		k, ok := key(req)
		fmt.Printf("%s → %q %v\n", u, k, ok)
	}
	// Output:
	// http://inventory.internal/items/lamp/stock → "sku:lamp" true
	// http://inventory.internal/items/%6Camp → "sku:lamp" true
	// http://inventory.internal/admin/items/lamp → "" false
	// http://elsewhere.example/items/lamp → "" false
}

// One client for two kinds of resources: a Key that asks each RouteKey in
// turn. A value the server's template refuses ("01" for {id:int}) maps to
// no key, so the token is not sent with it.
func ExampleRouteKey_severalKinds() {
	accounts, err := httpmw.RouteKey("account:{id:int}", "/accounts/{id}/debit")
	if err != nil {
		log.Fatal(err)
	}
	orders, err := httpmw.RouteKey("order:{id}", "/orders/{id}", "/orders/{id}/items")
	if err != nil {
		log.Fatal(err)
	}
	key := func(r *http.Request) (string, bool) {
		if k, ok := accounts(r); ok {
			return k, true
		}
		return orders(r)
	}
	_ = &http.Client{Transport: &httpmw.Transport{Key: key}}
	for _, u := range []string{
		"http://payments.internal/accounts/7/debit",
		"http://payments.internal/orders/7/items",
		"http://payments.internal/accounts/01/debit",
	} {
		req, _ := http.NewRequest(http.MethodPost, u, nil)
		k, ok := key(req)
		fmt.Printf("%s → %q %v\n", u, k, ok)
	}
	// Output:
	// http://payments.internal/accounts/7/debit → "account:7" true
	// http://payments.internal/orders/7/items → "order:7" true
	// http://payments.internal/accounts/01/debit → "" false
}

// A key template names the kind of resource, so two routes with an {id}
// wildcard never share a key (and a mark); {id:int} admits only the
// canonical form of an integer, so "01" cannot be a second lock on row 1.
func ExamplePathValue() {
	var fence token.MemoryFence
	accounts, err := httpmw.New(httpmw.Options{Resource: httpmw.PathValue("account:{id:int}"), Fence: &fence})
	if err != nil {
		log.Fatal(err)
	}
	orders, err := httpmw.New(httpmw.Options{Resource: httpmw.PathValue("order:{id}"), Fence: &fence})
	if err != nil {
		log.Fatal(err)
	}
	show := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, _, _ := token.FromContext(r.Context())
		fmt.Printf("  claimed %s\n", key)
		w.WriteHeader(http.StatusNoContent)
	})
	mux := http.NewServeMux()
	mux.Handle("POST /accounts/{id}/debit", accounts.Handler(show))
	mux.Handle("PUT /orders/{id}", orders.Handler(show))

	fmt.Println("debit account 7:", send(mux, "POST", "/accounts/7/debit", "9"))
	fmt.Println("order 7, a lower token:", send(mux, "PUT", "/orders/7", "5"))
	fmt.Println("debit account 07:", send(mux, "POST", "/accounts/07/debit", "9"))
	// Output:
	//   claimed account:7
	// debit account 7: 204
	//   claimed order:7
	// order 7, a lower token: 204
	// debit account 07: 404 no-resource
}

// The forged-token check with memlock as the lock service: the clock
// bound refuses made-up tokens far above the clock at no cost, and the
// sequencer check — memlock's Locker is a token.Sequencer — refuses
// anything above the current holder's token, so a forger can never lock
// the holder or its queue out.
func ExampleOptions_check() {
	ctx := context.Background()
	locker := memlock.New()
	var fence token.MemoryFence
	mw, err := httpmw.New(httpmw.Options{
		Resource: httpmw.PathValue("sku"),
		Fence:    &fence,
		// Resource key = lock key here ("sku:42"); otherwise map it with
		// SequencerOptions.LockKey.
		Check: token.All(token.ClockBound{}, token.SequencerCheck(locker, token.SequencerOptions{})),
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("PUT /sku/{sku}", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})))

	lease, err := locker.Acquire(ctx, "sku:42", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	fmt.Println("the holder:", send(mux, "PUT", "/sku/42", lease.Token().String()))
	fmt.Println("a forger, far above the clock:", send(mux, "PUT", "/sku/42", "18446744073709551615"))
	fmt.Println("a forger, just above the holder:", send(mux, "PUT", "/sku/42", (lease.Token()+1).String()))
	fmt.Println("the holder again:", send(mux, "PUT", "/sku/42", lease.Token().String()))
	fmt.Println("high-water is the holder's:", fence.HighWater("sku:42") == lease.Token())
	// Output:
	// the holder: 204
	// a forger, far above the clock: 403 forged-token
	// a forger, just above the holder: 403 forged-token
	// the holder again: 204
	// high-water is the holder's: true
}

// A custom ErrorWriter logs the cause, which the body never shows, and
// writes the standard problem.
func ExampleWriteProblem() {
	logger := log.New(os.Stdout, "", 0)
	mw, err := httpmw.New(httpmw.Options{
		Resource: httpmw.PathValue("sku"),
		Fence:    new(token.MemoryFence),
		ErrorWriter: func(w http.ResponseWriter, r *http.Request, p *httpmw.Problem) {
			logger.Printf("refused %s %s: %d: %v", r.Method, r.URL.Path, p.Status, p.Err)
			httpmw.WriteProblem(w, p)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("PUT /sku/{sku}", mw.Handler(http.NotFoundHandler()))
	send(mux, "PUT", "/sku/42", "-1")
	// Output:
	// refused PUT /sku/42: 400: invalid fencing token "-1": not a decimal digit at offset 0
}

// With a store enforcer behind the middleware, the store can still refuse
// a holder the middleware let in (a newer holder claimed the row in
// between); WriteStale answers with the same 409 the middleware would.
func ExampleWriteStale() {
	var fence token.MemoryFence
	mw, err := httpmw.New(httpmw.Options{Resource: httpmw.PathValue("sku"), Fence: &fence})
	if err != nil {
		log.Fatal(err)
	}
	// updateRow stands for the store enforcer (storage/postgres), which
	// here finds that token 9 claimed the row after this request passed.
	updateRow := func(ctx context.Context) error {
		_, t, _ := token.FromContext(ctx)
		return fmt.Errorf("update items: %w", &token.StaleError{Resource: "items/42", Presented: t, Current: 9})
	}
	mux := http.NewServeMux()
	mux.Handle("PUT /sku/{sku}", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := updateRow(r.Context()); err != nil {
			if httpmw.WriteStale(w, err) {
				return
			}
			http.Error(w, "store error", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})))
	fmt.Println("holder 8:", send(mux, "PUT", "/sku/42", "8"))
	// Output:
	// holder 8: 409 stale-token
}

// WriteError answers every error of a store enforcer — here a debit whose
// condition (enough balance) was false, and a stale holder — with its
// problem, and the client's Transport turns each back into an error that
// matches the sentinel the store's error matched.
func ExampleWriteError() {
	mw, err := httpmw.New(httpmw.Options{Resource: httpmw.PathValue("account:{id:int}"), Fence: httpmw.ClaimInStore})
	if err != nil {
		log.Fatal(err)
	}
	// debit stands for a fenced statement of storage/postgres, such as
	// accounts.Update(ctx, pool, id, 0, postgres.Add("balance", -n),
	// postgres.Where("balance >= $1", n)).
	debit := func(ctx context.Context, amount int) error {
		_, t, _ := token.FromContext(ctx)
		switch {
		case t < 9:
			return fmt.Errorf("update accounts: %w", &token.StaleError{Resource: "accounts/7", Presented: t, Current: 9})
		case amount > 100:
			return fmt.Errorf("update accounts: %w", token.ErrCondition)
		}
		return nil
	}
	mux := http.NewServeMux()
	mux.Handle("POST /accounts/{id}/debit", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		amount, _ := strconv.Atoi(r.URL.Query().Get("amount"))
		if err := debit(r.Context(), amount); err != nil {
			httpmw.WriteError(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	key, err := httpmw.RouteKey("account:{id:int}", "/accounts/{id}/debit")
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: &httpmw.Transport{Base: srv.Client().Transport, Key: key}}
	post := func(tok token.Token, amount int) error {
		ctx := token.NewContext(context.Background(), "account:7", tok) // guard.Do's context, in a holder
		req, _ := http.NewRequestWithContext(ctx, "POST", fmt.Sprintf("%s/accounts/7/debit?amount=%d", srv.URL, amount), nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}
	fmt.Println("debit 10:", post(9, 10))
	err = post(9, 1000)
	fmt.Println("debit 1000, insufficient:", errors.Is(err, token.ErrCondition))
	var stale *token.StaleError
	err = post(8, 10)
	fmt.Println("debit by a stale holder:", errors.As(err, &stale), stale.Current)
	var p *httpmw.Problem
	fmt.Println("its status:", errors.As(err, &p), p.Status)
	// Output:
	// debit 10: <nil>
	// debit 1000, insufficient: true
	// debit by a stale holder: true 9
	// its status: true 409
}

// RequireAll makes reads carry a token too.
func ExampleRequireAll() {
	mw, err := httpmw.New(httpmw.Options{
		Resource: httpmw.PathValue("sku"),
		Fence:    new(token.MemoryFence),
		Require:  httpmw.RequireAll,
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /sku/{sku}", mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	fmt.Println("GET without a token:", send(mux, "GET", "/sku/42", ""))
	// Output:
	// GET without a token: 428 missing-token
}

// The whole flow: a holder takes the lock with guard.Do and calls a
// service through a client on Transport, which sends the lease's token to
// the resource it was granted for; the service's middleware claims it
// before the handler runs. A holder that kept its token past its lease
// (paused, then woken) is refused with the StaleError the resource sent.
func Example() {
	// The resource service.
	var fence token.MemoryFence
	mw, err := httpmw.New(httpmw.Options{Resource: httpmw.PathValue("sku"), Fence: &fence})
	if err != nil {
		log.Fatal(err)
	}
	r := http.NewServeMux()
	r.Handle("PUT /items/{sku}/stock", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, _, _ := token.FromContext(r.Context())
		fmt.Printf("  service: %s written\n", key)
		w.WriteHeader(http.StatusNoContent)
	})))
	srv := httptest.NewServer(r)
	defer srv.Close()

	// The holder's side: lock keys are the service's resource keys.
	key, err := httpmw.RouteKey("sku", "/items/{sku}/stock")
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: &httpmw.Transport{Base: srv.Client().Transport, Key: key}}
	put := func(ctx context.Context, sku string) error {
		req, err := http.NewRequestWithContext(ctx, "PUT", srv.URL+"/items/"+sku+"/stock", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}
	g, err := guard.New(memlock.New(), guard.Options{TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	var paused context.Context // what a holder frozen in Do would still have
	var first token.Token
	err = g.Do(ctx, "sku:42", func(ctx context.Context, t token.Token) error {
		paused, first = context.WithoutCancel(ctx), t // keeps the token, outlives the lease
		return put(ctx, "42")
	})
	fmt.Println("first holder:", err)
	err = g.Do(ctx, "sku:42", func(ctx context.Context, t token.Token) error {
		fmt.Println("second holder's token is higher:", t > first)
		return put(ctx, "42")
	})
	fmt.Println("second holder:", err)

	err = put(paused, "42")
	var stale *token.StaleError
	fmt.Println("first holder, woken late, refused:", errors.As(err, &stale))
	// Output:
	//   service: sku:42 written
	// first holder: <nil>
	// second holder's token is higher: true
	//   service: sku:42 written
	// second holder: <nil>
	// first holder, woken late, refused: true
}
