// Consumer: fenceguard's ZooKeeper locker and guard.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/locks/zklock"
	"github.com/fenceguard/fenceguard/token"
)

func main() {
	locker, err := zklock.New([]string{os.Getenv("ZK")}, zklock.Options{})
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	g, err := guard.New(locker, guard.Options{TTL: 15 * time.Second})
	if err != nil {
		panic(err)
	}
	err = g.Do(context.Background(), "sku:42", func(ctx context.Context, t token.Token) error {
		fmt.Println("token", t)
		return nil
	})
	if err != nil {
		panic(err)
	}
}
