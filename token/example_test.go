package token_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/fenceguard/fenceguard/token"
)

func ExampleParse() {
	// A resource reads the token from the X-Fencing-Token header.
	for _, h := range []string{"1717171717171717", "0042", "-1", ""} {
		t, err := token.Parse(h)
		if err != nil {
			fmt.Println("rejected:", err)
			continue
		}
		fmt.Println("accepted:", t)
	}
	// Output:
	// accepted: 1717171717171717
	// rejected: invalid fencing token "0042": leading zero
	// rejected: invalid fencing token "-1": not a decimal digit at offset 0
	// rejected: invalid fencing token "": empty
}

func ExampleMemoryFence() {
	var fence token.MemoryFence
	ctx := context.Background()

	fmt.Println(fence.Claim(ctx, "sku:42", 7)) // holder with token 7 reads the stock
	fmt.Println(fence.Claim(ctx, "sku:42", 8)) // the lock moved on: token 8 claims
	err := fence.Claim(ctx, "sku:42", 7)       // the paused holder wakes up
	var stale *token.StaleError
	if errors.As(err, &stale) {
		fmt.Println("refused:", stale.Presented, "<", stale.Current)
	}
	// Output:
	// <nil>
	// <nil>
	// refused: 7 < 8
}
