// Peer: go-redsync/redsync.
package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

func main() {
	var pools []rsredis.Pool
	for _, addr := range strings.Split(os.Getenv("REDIS_ADDRS"), ",") {
		pools = append(pools, goredis.NewPool(redis.NewClient(&redis.Options{Addr: addr})))
	}
	m := redsync.New(pools...).NewMutex("sku:42", redsync.WithExpiry(15*time.Second))
	if err := m.Lock(); err != nil {
		panic(err)
	}
	fmt.Println("locked")
	if _, err := m.Unlock(); err != nil {
		panic(err)
	}
}
