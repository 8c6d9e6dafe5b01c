// Package servers gives tests real PostgreSQL, Redis, etcd and ZooKeeper
// servers, and the means to break them, with nothing but the standard
// library (and go.uber.org/goleak): it is the harness of every module of the
// repository, and adds no requirement to any module's go.mod. Being
// internal, no user of fenceguard can import it.
//
// Every test package that uses it calls [Main] from TestMain; Main stops all
// servers the package started, removes their directories and then fails the
// package if goroutines leaked (go.uber.org/goleak):
//
//	func TestMain(m *testing.M) { servers.Main(m) }
//
// # Shared servers, one namespace per test
//
// [Postgres], [Redis], [RedisN], [Etcd] and [ZooKeeper] start their server
// on first use and share it among all tests of the package (the machine has
// two cores: one server per kind and package, not per test). Each call gives
// the calling test its own namespace, removed when the test ends: a fresh
// database (CREATE DATABASE fg_…), a Redis key prefix, an etcd key prefix, a
// ZooKeeper chroot. Names carry a per-process random part, so test processes
// sharing one server from the environment do not collide. Tests must not
// inject faults into shared servers; they may put a [Proxy] in front.
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
//
// With neither, the test is skipped with a message that names the
// environment variable and the Debian package to install (postgresql,
// redis-server, etcd-server, zookeeper); on a machine with Docker but none
// of them, `go run ./integration/cmd/servers` starts containers and prints
// the variables to set. With FENCEGUARD_REQUIRE_SERVERS=1, as CI sets it,
// the test fails instead: a missing install cannot pass as green.
//
// # Faults
//
// [NewRedis], [NewRedisN], [NewRedisReplica], [NewRedisCluster], [NewPostgres], [NewEtcd],
// [NewEtcdCluster], [NewZooKeeper] and [NewZooKeeperEnsemble] start servers
// for the calling test alone, always from a local binary (a fault needs a
// process the harness owns), and tear them down when the test ends. Their
// [Server] handle stops (Stop), crashes (Kill, SIGKILL), freezes (Pause,
// SIGSTOP) and thaws (Resume, SIGCONT) the server process and restarts it on
// the same address (Start, keeping or wiping its data). [EtcdCluster.Leader]
// and [ZKEnsemble.Leader] say which member to hit. A [RedisCluster] fails
// a master over (Failover: CLUSTER FAILOVER on its replica; KillFailover:
// SIGKILL and the cluster's own promotion), reshards a slot (Migrate, with a
// hook midway for ASK), and says which master holds a key ([KeySlot],
// MasterForKey).
//
// [NewProxy] puts an in-process TCP proxy in front of any address, so a test
// can cut, delay, slow or blackhole its own clients' connections while the
// server, and other clients, carry on. A [RedisReplication]'s replica reaches its master
// through one, so replication itself can be cut or delayed.
//
// # The harness's own clients
//
// The harness talks to the servers through small clients of its own, in
// internal packages, so it needs no driver: RESP2 for Redis (PING, INFO,
// SCAN and DEL of a test's prefix), PostgreSQL's wire protocol (login with
// trust, password, md5 or SCRAM-SHA-256, over TLS when the DSN's sslmode
// asks for it; simple queries for CREATE and DROP DATABASE), etcd's JSON
// gateway (/health, status, member list, delete of a prefix), and
// ZooKeeper's own protocol for creating and deleting a test's chroot
// (recursively, on servers from the environment too) plus the srvr and envi
// four-letter words. Tests talk to the servers with the real client
// libraries of their own module.
//
// # Nothing left behind
//
// Server processes get SIGKILL from the kernel when the test binary dies
// (Linux parent-death signal), so even a crash or a test timeout leaves no
// server running. Their directories are removed by Main, or, after a crash, by
// the next Main on the machine (a lock file tells live owners from dead
// ones). The System V shared memory of a killed PostgreSQL is
// removed with them (on 64-bit Linux; elsewhere it stays, see ipcs -m). On
// SIGINT or SIGTERM Main stops everything before exiting.
//
// All functions are safe for concurrent use by parallel tests. Unix only.
package servers
