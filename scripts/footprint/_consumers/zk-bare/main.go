// Consumer: fenceguard's ZooKeeper locker alone, without the guard — the
// same work as zk-lock's program: lock, print, unlock.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/fenceguard/fenceguard/locks/zklock"
)

func main() {
	locker, err := zklock.New([]string{os.Getenv("ZK")}, zklock.Options{})
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	ctx := context.Background()
	lease, err := locker.Acquire(ctx, "sku:42", 15*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("token", lease.Token())
	if err := lease.Release(ctx); err != nil {
		panic(err)
	}
}
