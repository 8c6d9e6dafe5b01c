// Package harness gives tests real servers, and the means to break them:
// it starts server processes on free loopback ports, stops, kills, freezes
// and restarts them, cuts and delays connections through an in-process
// proxy, and tears everything down when the tests end. Package harness
// itself imports the standard library and go.uber.org/goleak only.
//
// One package per backend builds on it, each importing only its own
// backend's client:
//
//	harness/redisserver   Redis, replicas, Sentinel, Cluster (go-redis)
//	harness/pgserver      PostgreSQL, hot standbys (pgx)
//	harness/mysqlserver   MariaDB (database/sql, go-sql-driver/mysql)
//	harness/zkserver      ZooKeeper, standalone or ensemble (go-zookeeper)
//	harness/etcdserver    etcd, single member or cluster (clientv3; a module of its own)
//	harness/etcdembed     an etcd server inside the test process (a module of its own)
//	harness/fakeclock     a clock that moves when told to
//	harness/timeline      SVG pictures of lock holders over time
//
// The module github.com/fenceguard/fenceguard/harness holds all but the
// two etcd packages; it requires each client at the version the library
// module of that backend requires.
//
// Every test package that uses a server calls [Main] from TestMain; Main
// stops all servers the package started, removes their directories and
// then fails the package if goroutines leaked (go.uber.org/goleak):
//
//	func TestMain(m *testing.M) { harness.Main(m) }
//
// # Shared servers, one namespace per test
//
// A backend's Shared helper (redisserver.Shared, pgserver.Shared, …) starts
// its server on first use and shares it among all tests of the package
// (one server per kind and package, not per test). Each call gives the
// calling test its own namespace, removed when the test ends: a Redis key
// prefix, a fresh database, an etcd key prefix, a ZooKeeper chroot. Names
// carry a per-process random part, so test processes sharing one server
// do not collide. Tests must not inject faults into shared servers; they
// may put a [Proxy] in front.
//
// # Where a server comes from
//
// In this order:
//
//  1. An endpoint in the environment: FENCEGUARD_REDIS_ADDRS
//     (comma-separated), FENCEGUARD_PG_DSN, FENCEGUARD_MYSQL_DSN (MySQL
//     or MariaDB), FENCEGUARD_ETCD_ENDPOINTS, FENCEGUARD_ZK_ADDRS. Only
//     the shared helpers use them.
//  2. A local binary, on PATH or where Debian installs it (redis-server,
//     /usr/lib/postgresql/*/bin, mariadbd and mariadb-install-db, etcd,
//     java with /usr/share/java/zookeeper.jar), started on a free loopback
//     port in a directory under /tmp, as the postgres user for PostgreSQL
//     when the tests run as root.
//
// With neither, the test is skipped with a message that names the
// environment variable and the Debian package to install. With
// FENCEGUARD_REQUIRE_SERVERS=1 ([EnvRequireServers]), as CI sets it, the
// test fails instead: a missing install cannot pass as green.
//
// # Faults
//
// A backend's New helpers (redisserver.New, pgserver.New,
// etcdserver.NewCluster, zkserver.NewEnsemble, …) start servers for the
// calling test alone, always from a local binary, and tear them down when
// the test ends. Their [Server] handle stops (Stop), crashes (Kill,
// SIGKILL), freezes (Pause, SIGSTOP) and thaws (Resume, SIGCONT) the server
// process and restarts it on the same address (Start, keeping or wiping its
// data). [NewProxy] puts an in-process TCP proxy in front of any address,
// so a test can cut, delay, slow or blackhole its own clients' connections
// while the server, and other clients, carry on. [ShapeLoopback] lets a
// test shape loopback traffic with tc.
//
// # Timing under load
//
// Tests run on loaded machines: two cores, -race, other packages' tests at
// once. Wait for a consequence with [WaitFor] or [Eventually] (poll, bounded)
// rather than a fixed sleep. Check "returned by its deadline" against an
// allowance that includes the scheduling stalls the process suffered after
// the deadline: [StartLateness] measures them and [Lateness.Allowance]
// adds them to a base allowance.
//
// # Nothing left behind
//
// Server processes get SIGKILL from the kernel when the test binary dies
// (Linux parent-death signal), so even a crash or a test timeout leaves no
// server running. Their directories are removed by Main, or, after a
// crash, by the next Main on the machine (a lock file tells live owners
// from dead ones). The System V shared memory of a killed PostgreSQL is
// removed with them (on 64-bit Linux). On SIGINT or SIGTERM Main stops
// everything before exiting.
//
// # Writing a backend
//
// A backend implements [Kind] (configuration, command line, readiness) and
// starts servers with [Launch], or [Create] and [Server.Start] for
// clusters; [Shared], [Namespace], [SkipOrFail], [Cleanup] and
// [ExamplesNeed] give it the shared-server, skip and clean-up behaviour
// above.
//
// All functions are safe for concurrent use by parallel tests. Unix only.
package harness
