// Package mysqlserver gives tests MariaDB servers started by the
// [harness] and reached with database/sql and go-sql-driver/mysql.
//
// [Shared] creates a database of the calling test's own on the package's
// shared server and drops it when the test ends. [New] starts a server for
// one test, to fault through its [harness.Server] handle. [DSN] is a
// server's data source name in go-sql-driver/mysql's form (user root, no
// password). [Start] starts a throwaway server for a program rather than a
// test.
//
// The servers run mariadb-install-db and mariadbd from the local install
// (Debian's mariadb-server) with --no-defaults, so the machine's own
// MariaDB configuration, port and socket play no part; each server has its
// data directory and socket under its own directory and listens on a free
// loopback port. Commits reach the operating system before they are
// acknowledged (innodb_flush_log_at_trx_commit=2): a Kill is a process
// crash, not a power cut. The test package's TestMain calls harness.Main.
//
// With FENCEGUARD_MYSQL_DSN set ([EnvDSN]), Shared uses that server
// instead, MySQL or MariaDB: the way to test against a MySQL server, which
// Debian does not package.
package mysqlserver
