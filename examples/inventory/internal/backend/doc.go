// Package backend opens what the inventory runs on, as chosen by flags: the
// lock service the workers lock with (etcd, Redis, Redlock, ZooKeeper) and
// the store the service keeps items in (PostgreSQL, or memory).
//
// [OpenStore] in "auto" mode is the zero-setup path: PostgreSQL from the
// database URL (DATABASE_URL), else a throwaway local PostgreSQL server when
// its binaries are installed (the test harness's StartPostgres: a temporary
// directory, a free loopback port, the postgres user when run as root;
// removed on Close), else the in-memory store, with a notice saying what was
// skipped and why.
//
// Whoever opens a locker or a store must close it. Nothing here is shared
// between goroutines except what the returned values document.
package backend
