// Peer: bsm/redislock and pgx doing what redis-pg does, unfenced.
package main

import (
	"context"
	"os"
	"time"

	"github.com/bsm/redislock"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

func main() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	locker := redislock.New(rdb)
	lock, err := locker.Obtain(ctx, "sku:42", 15*time.Second, &redislock.Options{RetryStrategy: redislock.LinearBackoff(10 * time.Millisecond)})
	if err != nil {
		panic(err)
	}
	defer lock.Release(ctx)
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	var stock int
	if err := pool.QueryRow(ctx, `SELECT stock FROM items WHERE id = $1`, 42).Scan(&stock); err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE items SET stock = $2 WHERE id = $1`, 42, stock-1); err != nil {
		panic(err)
	}
}
