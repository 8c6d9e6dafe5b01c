// Package pgserver gives tests PostgreSQL servers started by the
// [harness] and reached with pgx.
//
// [Shared] creates a database of the calling test's own on the package's
// shared server and drops it when the test ends. [New] starts a server for
// one test, to fault through its [harness.Server] handle; [NewStandby] a
// hot standby of it. [DSN] is a server's connection string (user
// postgres, trust authentication). [Start] starts a throwaway server for a
// program rather than a test (the inventory demo).
//
// The servers run initdb and postgres from the local install (as the
// postgres user when the tests run as root), with fsync off: a Kill is a
// process crash, not a power cut. The test package's TestMain calls
// harness.Main. With FENCEGUARD_PG_DSN set, Shared uses that server.
package pgserver
