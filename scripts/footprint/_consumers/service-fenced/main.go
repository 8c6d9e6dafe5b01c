// The service of issue 16 after adding fenceguard's Redis locker, guard and
// PostgreSQL column mode: what it must upgrade is what fenceguard costs it.
package main

import (
	"context"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

func main() {
	_ = grpc.NewServer()
	_ = otel.Tracer("service")
	prometheus.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "requests_total"}))
	_ = unix.Getpid()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	pool, _ := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	locker, _ := redislock.New(rdb, redislock.Options{})
	g, _ := guard.New(locker, guard.Options{TTL: 15 * time.Second})
	items, _ := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id"})
	_ = g.Do(ctx, "sku:42", func(ctx context.Context, t token.Token) error {
		return items.Update(ctx, pool, 42, t, postgres.Set("stock", 1))
	})
}
