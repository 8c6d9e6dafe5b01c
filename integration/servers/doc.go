// Package servers gives tests real PostgreSQL, Redis, etcd and ZooKeeper
// servers, and the means to break them.
//
// Every test package that uses it calls [Main] from TestMain; Main stops all
// servers the package started, removes their directories and then fails the
// package if goroutines leaked (go.uber.org/goleak):
//
//	func TestMain(m *testing.M) { servers.Main(m) }
//
// # Shared servers, one namespace per test
//
// [Postgres], [Redis], [RedisN], [Etcd], [EtcdEmbedded] and [ZooKeeper] start
// their server on first use and share it among all tests of the package (the
// machine has two cores: one server per kind and package, not per test). Each
// call gives the calling test its own namespace, removed when the test ends: a
// fresh database (CREATE DATABASE fg_…), a Redis key prefix, an etcd key
// prefix, a ZooKeeper chroot. Names carry a per-process random part, so test
// processes sharing one server from the environment do not collide. Tests must
// not inject faults into shared servers; they may put a [Proxy] in front.
//
// # Where a server comes from
//
// In this order:
//
//  1. An endpoint in the environment: FENCEGUARD_PG_DSN, FENCEGUARD_REDIS_ADDRS
//     (comma-separated), FENCEGUARD_ETCD_ENDPOINTS, FENCEGUARD_ZK_ADDRS (see the
//     Env constants). Only the shared helpers use them.
//  2. A local binary, on PATH or where Debian installs it (redis-server,
//     etcd, /usr/lib/postgresql/*/bin, java with /usr/share/java/zookeeper.jar),
//     started on a free loopback port in a directory under /tmp, as the
//     postgres user for PostgreSQL when the tests run as root.
//  3. testcontainers-go, when a Docker engine answers: the official postgres
//     and redis modules, generic containers for etcd and ZooKeeper. This is
//     the path for machines with Docker but without the servers installed.
//
// With none of them, the test is skipped with a message that names the
// environment variable and the Debian package to install (postgresql,
// redis-server, etcd-server, zookeeper). With FENCEGUARD_REQUIRE_SERVERS=1, as
// CI sets it, the test fails instead: a missing install cannot pass as green.
// [EtcdEmbedded] needs nothing installed: it runs etcd inside the test process
// (package embedetcd).
//
// # Faults
//
// [NewRedis], [NewRedisN], [NewPostgres], [NewEtcd], [NewEtcdCluster],
// [NewZooKeeper] and [NewZooKeeperEnsemble] start servers for the calling
// test alone, always from a local binary (a fault needs a process the
// harness owns), and tear them down when the test ends. Their [Server] handle stops (Stop), crashes (Kill, SIGKILL),
// freezes (Pause, SIGSTOP) and thaws (Resume, SIGCONT) the server process and
// restarts it on the same address (Start, keeping or wiping its data).
//
// [NewProxy] puts an in-process toxiproxy in front of any address, so a test
// can cut, delay, slow or blackhole its own clients' connections while the
// server, and other clients, carry on.
//
// # Nothing left behind
//
// Server processes get SIGKILL from the kernel when the test binary dies
// (Linux parent-death signal), so even a crash or a test timeout leaves no
// server running. Their directories are removed by Main, or, after a crash, by
// the next Main on the machine (a lock file tells live owners from dead ones).
// On SIGINT or SIGTERM Main stops everything before exiting.
//
// All functions are safe for concurrent use by parallel tests.
package servers
