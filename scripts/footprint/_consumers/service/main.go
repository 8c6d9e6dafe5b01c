// The service of issue 16: gRPC, OpenTelemetry, Prometheus, x/sys,
// go-redis and pgx at the versions it already runs, before fenceguard.
package main

import (
	"context"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
)

func main() {
	_ = grpc.NewServer()
	_ = otel.Tracer("service")
	prometheus.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "requests_total"}))
	_ = unix.Getpid()
	_ = redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	_, _ = pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
}
