package servers

// The testcontainers path: the source of shared servers on machines with a
// Docker engine but without the servers installed (no env endpoint, no local
// binary). Containers live until Main's teardown. Dedicated servers (faults)
// always need a local binary.

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
	"github.com/testcontainers/testcontainers-go/wait"
	"go.uber.org/goleak"
)

// Images used on the testcontainers path.
const (
	postgresImage  = "postgres:16-alpine"
	redisImage     = "redis:7-alpine"
	etcdImage      = "gcr.io/etcd-development/etcd:v3.5.21"
	zookeeperImage = "zookeeper:3.8"
)

var docker struct {
	once sync.Once
	ok   bool
}

// dockerAvailable reports, once per process, whether a Docker engine answers.
func dockerAvailable() bool {
	docker.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cli, err := testcontainers.NewDockerClientWithOpts(ctx)
		if err != nil {
			return
		}
		defer cli.Close()
		_, err = cli.Ping(ctx, client.PingOptions{})
		docker.ok = err == nil
	})
	return docker.ok
}

var quietContainers = testcontainers.WithLogger(tclog.NewNoopLogger())

// keep registers a started container for teardown. The reaper (Ryuk) keeps a
// connection open for the life of the process: its goroutines are not leaks.
func keep(c testcontainers.Container) {
	atTeardown(func() error { return testcontainers.TerminateContainer(c) })
	registry.mu.Lock()
	registry.leakOpts = append(registry.leakOpts, goleak.IgnoreCurrent())
	registry.mu.Unlock()
}

func containerCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*time.Minute) // may pull the image
}

// postgresContainer returns the admin DSN of a new PostgreSQL container.
func postgresContainer() (string, error) {
	ctx, cancel := containerCtx()
	defer cancel()
	c, err := tcpostgres.Run(ctx, postgresImage, quietContainers, tcpostgres.BasicWaitStrategies())
	if c != nil {
		keep(c)
	}
	if err != nil {
		return "", err
	}
	return c.ConnectionString(ctx, "sslmode=disable")
}

// redisContainer returns the host:port of a new Redis container.
func redisContainer() (string, error) {
	ctx, cancel := containerCtx()
	defer cancel()
	c, err := tcredis.Run(ctx, redisImage, quietContainers)
	if c != nil {
		keep(c)
	}
	if err != nil {
		return "", err
	}
	uri, err := c.ConnectionString(ctx)
	return strings.TrimPrefix(uri, "redis://"), err
}

// etcdContainer returns the client endpoint of a new single-member etcd.
func etcdContainer() (string, error) {
	ctx, cancel := containerCtx()
	defer cancel()
	c, err := testcontainers.Run(ctx, etcdImage, quietContainers,
		testcontainers.WithCmd("etcd",
			"--listen-client-urls", "http://0.0.0.0:2379",
			"--advertise-client-urls", "http://127.0.0.1:2379"),
		testcontainers.WithExposedPorts("2379/tcp"),
		testcontainers.WithWaitStrategy(
			wait.ForListeningPort("2379/tcp"),
			wait.ForLog("ready to serve client requests")),
	)
	if c != nil {
		keep(c)
	}
	if err != nil {
		return "", err
	}
	return c.PortEndpoint(ctx, "2379/tcp", "")
}

// zookeeperContainer returns the host:port of a new standalone ZooKeeper.
func zookeeperContainer() (string, error) {
	ctx, cancel := containerCtx()
	defer cancel()
	c, err := testcontainers.Run(ctx, zookeeperImage, quietContainers,
		testcontainers.WithEnv(map[string]string{"ZOO_4LW_COMMANDS_WHITELIST": "srvr,ruok,mntr"}),
		testcontainers.WithExposedPorts("2181/tcp"),
		testcontainers.WithWaitStrategy(
			wait.ForListeningPort("2181/tcp"),
			wait.ForLog("binding to port")),
	)
	if c != nil {
		keep(c)
	}
	if err != nil {
		return "", err
	}
	return c.PortEndpoint(ctx, "2181/tcp", "")
}
