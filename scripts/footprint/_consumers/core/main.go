// Consumer: the core alone — guard, memlock, token and the HTTP middleware
// with its client Transport.
package main

import (
	"context"
	"net/http"
	"time"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/token"
)

func main() {
	locker := memlock.New()
	g, err := guard.New(locker, guard.Options{TTL: 15 * time.Second})
	if err != nil {
		panic(err)
	}
	mw, err := httpmw.New(httpmw.Options{Resource: httpmw.PathValue("sku"), Fence: new(token.MemoryFence)})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("PUT /sku/{sku}", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	client := &http.Client{Transport: &httpmw.Transport{}}
	_ = g.Do(context.Background(), "sku:42", func(ctx context.Context, t token.Token) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://127.0.0.1:0/sku/42", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	})
	_ = http.ListenAndServe("127.0.0.1:0", mux)
}
