// Consumer: fenceguard's Redlock and guard.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/locks/redislock/redlock"
	"github.com/fenceguard/fenceguard/token"
)

func main() {
	var nodes []redlock.Client
	for _, addr := range strings.Split(os.Getenv("REDIS_ADDRS"), ",") {
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: addr}))
	}
	locker, err := redlock.New(nodes, redlock.Options{})
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
