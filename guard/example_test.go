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

func ExampleGuard_DoAll() {
	g, err := guard.New(memlock.New(), guard.Options{TTL: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	var accounts token.MemoryFence
	balance := map[string]int{"acct:1": 100, "acct:2": 0}

	// A transfer locks both accounts, in whatever order they are named:
	// the guard takes them in one order, so two transfers between the same
	// accounts in opposite directions cannot deadlock.
	err = g.DoAll(context.Background(), []string{"acct:2", "acct:1"}, func(ctx context.Context, t map[string]token.Token) error {
		// Each account is fenced with its own key's token. The zero token
		// takes it from ctx, which carries them all.
		for _, acct := range []string{"acct:1", "acct:2"} {
			if err := accounts.Claim(ctx, acct, 0); err != nil {
				return err
			}
		}
		balance["acct:1"] -= 30
		balance["acct:2"] += 30
		fmt.Println("two tokens, one per account:", t["acct:1"] > 0 && t["acct:2"] > 0 && t["acct:1"] != t["acct:2"])
		return nil
	})
	fmt.Println("error:", err, "balances:", balance["acct:1"], balance["acct:2"])
	// Output:
	// two tokens, one per account: true
	// error: <nil> balances: 70 30
}
