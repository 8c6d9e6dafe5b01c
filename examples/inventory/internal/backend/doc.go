// Package backend opens what the inventory runs on, as chosen by flags: the
// lock service the workers lock with (etcd, Redis, Redlock, ZooKeeper) and
// the store the service keeps items in (PostgreSQL, MySQL or MariaDB, or
// memory).
//
// [OpenStore] in "auto" mode is the zero-setup path: the database the URL
// names (DATABASE_URL) — MySQL or MariaDB for a mysql:// URL, PostgreSQL
// for any other — else a throwaway local PostgreSQL server when its
// binaries are installed (the test harness's pgserver.Start: a temporary
// directory, a free loopback port, the postgres user when run as root;
// removed on Close), else the in-memory store, with a notice saying what was
// skipped and why. "mysql" mode takes a mysql:// URL or a
// go-sql-driver/mysql data source name ([MySQLConfig]), else starts a
// throwaway local MariaDB (harness mysqlserver.Start) in a database
// "inventory"; "postgres" and "mysql" fail rather than fall back to
// memory.
//
// Whoever opens a locker or a store must close it. Nothing here is shared
// between goroutines except what the returned values document.
package backend
