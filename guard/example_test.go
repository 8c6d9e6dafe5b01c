package guard_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/token"
)

func ExampleGuard_Do() {
	g, err := guard.New(memlock.New(), guard.Options{TTL: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	// The resource side: here an in-memory fence; in production the store
	// (storage/postgres) or the HTTP middleware (httpmw) checks the token.
	var stock token.MemoryFence

	err = g.Do(context.Background(), "sku:42", func(ctx context.Context, t token.Token) error {
		// Every access carries the token. ctx is cancelled if the lease is
		// lost; the fence refuses us if someone newer got there first.
		if err := stock.Claim(ctx, "sku:42", t); err != nil {
			return err
		}
		fmt.Println("sold one unit of sku:42 under a fresh token:", t > 0)
		return nil
	})
	fmt.Println("error:", err)
	// Output:
	// sold one unit of sku:42 under a fresh token: true
	// error: <nil>
}
