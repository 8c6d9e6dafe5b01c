// Consumer: fenceguard's Redis locker, guard and PostgreSQL column mode.
package main

import (
	"context"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

func main() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	locker, err := redislock.New(rdb, redislock.Options{})
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	g, err := guard.New(locker, guard.Options{TTL: 15 * time.Second})
	if err != nil {
		panic(err)
	}
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	items, err := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id"})
	if err != nil {
		panic(err)
	}
	err = g.Do(ctx, "sku:42", func(ctx context.Context, t token.Token) error {
		var stock int
		if err := items.Read(ctx, pool, 42, t, []string{"stock"}, &stock); err != nil {
			return err
		}
		return items.Update(ctx, pool, 42, t, postgres.Set("stock", stock-1))
	})
	if err != nil {
		panic(err)
	}
}
