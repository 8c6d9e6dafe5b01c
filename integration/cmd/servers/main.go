// Command servers starts the servers fenceguard's tests need — PostgreSQL,
// Redis, etcd, ZooKeeper and MySQL 8 — in Docker containers
// (testcontainers-go), and prints the environment variables that point the
// tests at them. It is the path for machines with a Docker engine but
// without the servers installed, and the way to run storage/mysql's tests
// against MySQL itself (the local path starts MariaDB, as Debian packages
// no MySQL):
//
//	go run ./integration/cmd/servers -env > /tmp/fg.env   # keeps running
//	set -a; . /tmp/fg.env; set +a
//	go test -race github.com/fenceguard/fenceguard/...
//
// It runs until interrupted (SIGINT or SIGTERM), then removes the
// containers. The tests use these servers as shared servers; tests that
// inject faults (kill, pause or restart a server) always start their own
// from a local install and skip without one.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	tcmysql "github.com/testcontainers/testcontainers-go/modules/mysql"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Images, one per server.
const (
	postgresImage  = "postgres:16-alpine"
	redisImage     = "redis:7-alpine"
	etcdImage      = "gcr.io/etcd-development/etcd:v3.5.21"
	zookeeperImage = "zookeeper:3.8"
	mysqlImage     = "mysql:8.4"
)

// mysqlRootPassword is the password of MySQL's root user in its container.
// The tests connect as root: each test creates a database of its own
// (CREATE DATABASE), which the module's default user may not.
const mysqlRootPassword = "fenceguard"

func main() { os.Exit(run()) }

// run starts the servers and waits for a signal. It returns the exit
// status: 1 when a server did not start.
func run() int {
	envOnly := flag.Bool("env", false, "print only the variable assignments (for a shell to source)")
	redisN := flag.Int("redis", 5, "independent Redis servers (Redlock's tests need 5)")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("servers: ")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var started []testcontainers.Container
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, c := range started {
			// A module's Run that failed early returns a nil
			// *XContainer, which TerminateContainer skips.
			if err := testcontainers.TerminateContainer(c, testcontainers.StopContext(cctx)); err != nil {
				log.Printf("removing a container: %v", err)
			}
		}
	}()
	keep := func(c testcontainers.Container, err error) testcontainers.Container {
		if c != nil {
			started = append(started, c)
		}
		if err != nil {
			log.Printf("%v", err)
			stop()
			return nil
		}
		return c
	}
	quiet := testcontainers.WithLogger(tclog.NewNoopLogger())
	env := map[string]string{}

	pg := keep(tcpostgres.Run(ctx, postgresImage, quiet, tcpostgres.BasicWaitStrategies()))
	if pg == nil {
		return 1
	}
	dsn, err := pg.(*tcpostgres.PostgresContainer).ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		log.Print(err)
		return 1
	}
	env["FENCEGUARD_PG_DSN"] = dsn

	var redisAddrs []string
	for range *redisN {
		r := keep(tcredis.Run(ctx, redisImage, quiet))
		if r == nil {
			return 1
		}
		uri, err := r.(*tcredis.RedisContainer).ConnectionString(ctx)
		if err != nil {
			log.Print(err)
			return 1
		}
		redisAddrs = append(redisAddrs, strings.TrimPrefix(uri, "redis://"))
	}
	env["FENCEGUARD_REDIS_ADDRS"] = strings.Join(redisAddrs, ",")

	etcd := keep(testcontainers.Run(ctx, etcdImage, quiet,
		testcontainers.WithCmd("etcd",
			"--listen-client-urls", "http://0.0.0.0:2379",
			"--advertise-client-urls", "http://127.0.0.1:2379"),
		testcontainers.WithExposedPorts("2379/tcp"),
		testcontainers.WithWaitStrategy(wait.ForListeningPort("2379/tcp"), wait.ForLog("ready to serve client requests")),
	))
	if etcd == nil {
		return 1
	}
	ep, err := etcd.PortEndpoint(ctx, "2379/tcp", "")
	if err != nil {
		log.Print(err)
		return 1
	}
	env["FENCEGUARD_ETCD_ENDPOINTS"] = ep

	zk := keep(testcontainers.Run(ctx, zookeeperImage, quiet,
		testcontainers.WithEnv(map[string]string{"ZOO_4LW_COMMANDS_WHITELIST": "srvr,ruok,mntr"}),
		testcontainers.WithExposedPorts("2181/tcp"),
		testcontainers.WithWaitStrategy(wait.ForListeningPort("2181/tcp"), wait.ForLog("binding to port")),
	))
	if zk == nil {
		return 1
	}
	zkAddr, err := zk.PortEndpoint(ctx, "2181/tcp", "")
	if err != nil {
		log.Print(err)
		return 1
	}
	env["FENCEGUARD_ZK_ADDRS"] = zkAddr

	// As root (the module then sets MYSQL_ROOT_PASSWORD and creates no
	// other user): DSN root:…@tcp(host:port)/test, whose default database
	// the tests replace with their own.
	my := keep(tcmysql.Run(ctx, mysqlImage, quiet,
		tcmysql.WithUsername("root"), tcmysql.WithPassword(mysqlRootPassword)))
	if my == nil {
		return 1
	}
	myDSN, err := my.(*tcmysql.MySQLContainer).ConnectionString(ctx)
	if err != nil {
		log.Print(err)
		return 1
	}
	env["FENCEGUARD_MYSQL_DSN"] = myDSN

	printEnv(os.Stdout, env, *envOnly)
	if !*envOnly {
		log.Print("running; interrupt to remove the containers")
	}
	<-ctx.Done()
	return 0
}

func printEnv(w io.Writer, env map[string]string, bare bool) {
	for _, k := range []string{"FENCEGUARD_PG_DSN", "FENCEGUARD_REDIS_ADDRS", "FENCEGUARD_ETCD_ENDPOINTS", "FENCEGUARD_ZK_ADDRS", "FENCEGUARD_MYSQL_DSN"} {
		if bare {
			fmt.Fprintf(w, "%s=%q\n", k, env[k])
		} else {
			fmt.Fprintf(w, "export %s=%q\n", k, env[k])
		}
	}
}
