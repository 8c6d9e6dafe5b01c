package pgserver

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fenceguard/fenceguard/harness"
)

// EnvDSN is a DSN of a PostgreSQL server whose user may CREATE DATABASE,
// for the shared helper, e.g.
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable.
const EnvDSN = "FENCEGUARD_PG_DSN"

// DB is a test's own database on a PostgreSQL server. It is created for the
// test (CREATE DATABASE fg_…) and dropped when the test ends.
type DB struct {
	DSN      string          // connects to Database; pgx.Connect, pgxpool.New and libpq accept it
	Database string          // e.g. fg_1a2b3c_7
	Server   *harness.Server // the process when the harness started it, else nil; no faults: it is shared
}

// Shared returns a fresh database, for the calling test alone, on the
// package's shared PostgreSQL server (started on first use).
func Shared(t testing.TB) *DB {
	t.Helper()
	return newDatabase(t, shared.Get(t, startShared))
}

// ExamplesNeed declares that the package's Example functions use the shared
// PostgreSQL server ([Example]); call it from TestMain before harness.Main.
func ExamplesNeed() {
	harness.ExamplesNeed("PostgreSQL", func() (string, error) {
		_, skip, err := shared.Load(startShared)
		return skip, err
	})
}

// Example returns a fresh database for the calling Example function on the
// package's shared PostgreSQL server. It is dropped with the server at the
// end of the package (on a server from the environment it stays).
func Example() *DB {
	_ = harness.ExampleID() // checks Main
	sh, skip, err := shared.Load(startShared)
	if skip != "" || err != nil {
		harness.ExampleUnavailable("PostgreSQL", skip, err)
	}
	pg, err := createDatabase(sh)
	if err != nil {
		harness.ExampleUnavailable("PostgreSQL", "", err)
	}
	return pg
}

// newDatabase creates the calling test's database through sh's admin DSN and
// drops it when the test ends.
func newDatabase(t testing.TB, sh pgShared) *DB {
	t.Helper()
	pg, err := createDatabase(sh)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pgDropDatabase(sh.admin, pg.Database); err != nil {
			t.Logf("pgserver: dropping database %s: %v", pg.Database, err)
		}
	})
	return pg
}

// createDatabase makes a fresh database on sh.
func createDatabase(sh pgShared) (*DB, error) {
	db := "fg_" + strings.ReplaceAll(harness.UniqueID(), "-", "_")
	if err := pgAdmin(sh.admin, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
		return nil, fmt.Errorf("pgserver: creating database %s: %w", db, err)
	}
	return &DB{DSN: withDatabase(sh.admin, db), Database: db, Server: sh.server}, nil
}

type pgShared struct {
	admin  string // DSN of a database to run CREATE DATABASE from
	server *harness.Server
}

var shared harness.Shared[pgShared]

func startShared() (pgShared, string, error) {
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		return pgShared{admin: dsn}, "", nil
	}
	if pgBinDir() != "" {
		k, err := newPGKind()
		if err != nil {
			return pgShared{}, "", err
		}
		s, err := harness.Launch(k, "postgres", 1)
		if err != nil {
			return pgShared{}, "", err
		}
		return pgShared{admin: DSN(s), server: s}, "", nil
	}
	return pgShared{}, harness.NoServerMessage("PostgreSQL", EnvDSN, "postgresql"), nil
}

// New starts a PostgreSQL server for the calling test alone, to inject
// faults into; it is torn down when the test ends. [DSN] gives its
// connection string (user postgres, no password).
func New(t testing.TB) *harness.Server {
	t.Helper()
	harness.RequireMain(t)
	if pgBinDir() == "" {
		harness.SkipOrFail(t, harness.NoBinaryMessage("pgserver.New", "PostgreSQL (initdb, postgres)", "postgresql"))
	}
	k, err := newPGKind()
	if err != nil {
		t.Fatal(err)
	}
	s, err := harness.Launch(k, "postgres", 1)
	if err != nil {
		t.Fatal(err)
	}
	harness.Cleanup(t, s)
	return s
}

// Start starts a throwaway PostgreSQL server for a program rather than a
// test — the inventory demo — the way the tests get theirs: initdb in a new
// directory under /tmp, on a free loopback port, as the postgres user when
// the caller is root. [DSN] gives its connection string (user postgres,
// trust authentication, loopback only). The caller must call
// [harness.Server.Close]; see [harness.LaunchProgram].
//
// It fails with an error wrapping [harness.ErrNotInstalled] when there is
// no local install; the environment is not considered.
func Start(ctx context.Context) (*harness.Server, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if pgBinDir() == "" {
		return nil, fmt.Errorf("%w: PostgreSQL (initdb and postgres, Debian package postgresql)", harness.ErrNotInstalled)
	}
	k, err := newPGKind()
	if err != nil {
		return nil, err
	}
	return harness.LaunchProgram(ctx, k, "postgres", 1)
}

// DSN returns, for a PostgreSQL server of this package ([New], [Start],
// [NewStandby]), a URL connecting to its "postgres" database as the
// superuser postgres (trust authentication). For other kinds of server it
// returns "".
func DSN(s *harness.Server) string {
	switch s.Kind().(type) {
	case *pgKind, *standbyKind:
	default:
		return ""
	}
	return "postgres://postgres@" + s.Addr() + "/postgres?sslmode=disable"
}

// pgKind runs initdb and postgres as the postgres user when we are root
// (PostgreSQL refuses to run as root). The server is our direct child, so
// signals and the parent-death signal reach the postmaster itself.
type pgKind struct {
	bin      string               // directory with initdb and postgres
	attr     *syscall.SysProcAttr // the postgres user's; nil: run as ourselves
	uid, gid int
}

func newPGKind() (*pgKind, error) {
	k := &pgKind{bin: pgBinDir(), uid: -1, gid: -1}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("pgserver: PostgreSQL refuses to run as root and there is no postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		k.uid, k.gid = uid, gid
		k.attr = runAs(uid, gid)
	}
	return k, nil
}

// sysProcAttr runs a PostgreSQL tool as the postgres user when we are root.
func (k *pgKind) sysProcAttr() *syscall.SysProcAttr {
	if k.attr == nil {
		return nil
	}
	a := *k.attr
	return &a
}

func (k *pgKind) Prepare(ctx context.Context, s *harness.Server) error {
	if k.attr != nil {
		if err := os.Chown(s.Dir(), k.uid, k.gid); err != nil {
			return err
		}
	}
	if _, err := os.Stat(filepath.Join(s.DataDir(), "PG_VERSION")); err == nil {
		return nil
	}
	cmd := exec.CommandContext(ctx, filepath.Join(k.bin, "initdb"),
		"-D", s.DataDir(), "-A", "trust", "-U", "postgres", "--no-sync",
		"-E", "UTF8", "--locale=C")
	cmd.Dir = "/" // the postgres user may not enter our working directory
	cmd.SysProcAttr = k.sysProcAttr()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	return nil
}

func (k *pgKind) Command(s *harness.Server) (*exec.Cmd, error) {
	cmd := exec.Command(filepath.Join(k.bin, "postgres"),
		"-D", s.DataDir(),
		"-p", strconv.Itoa(s.Port()),
		"-k", s.Dir(),
		"-c", "listen_addresses=127.0.0.1",
		// Committed data must survive Kill (a process crash) as it would on a
		// real server; only a machine crash may lose it. So no
		// synchronous_commit=off: it acknowledges commits still in shared memory.
		"-c", "fsync=off",
		"-c", "max_connections=200",
		"-c", "shared_buffers=64MB",
	)
	cmd.Dir = "/"
	cmd.SysProcAttr = k.sysProcAttr()
	return cmd, nil
}

// Ready logs in for real and checks that the server answering is ours.
func (k *pgKind) Ready(ctx context.Context, s *harness.Server, pid int) error {
	conn, err := pgx.Connect(ctx, DSN(s))
	if err != nil {
		return err // 57P03 "the database system is starting up" included
	}
	defer conn.Close(context.Background())
	var dir string
	if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&dir); err != nil {
		return err
	}
	if dir != s.DataDir() {
		return fmt.Errorf("%w: the server on %s serves %s", harness.ErrPortTaken, s.Addr(), dir)
	}
	return nil
}

// StopSignal is PostgreSQL's "fast" shutdown: abort sessions, checkpoint, exit.
func (*pgKind) StopSignal() syscall.Signal { return syscall.SIGINT }

// GracefulTeardown lets the postmaster remove its shared memory.
func (*pgKind) GracefulTeardown() bool        { return true }
func (*pgKind) CanWipe(*harness.Server) error { return nil }

// pgAdmin runs one statement on its own short-lived connection (tests
// create databases in parallel).
func pgAdmin(dsn, stmt string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, stmt).ReadAll()
	return err
}

// pgDropDatabase drops db, ending its sessions first (WITH (FORCE), from
// PostgreSQL 13 on; older servers answer syntax_error and get a plain DROP).
func pgDropDatabase(admin, db string) error {
	q := "DROP DATABASE IF EXISTS " + pgx.Identifier{db}.Sanitize()
	err := pgAdmin(admin, q+" WITH (FORCE)")
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42601" { // syntax_error
		err = pgAdmin(admin, q)
	}
	return err
}

// withDatabase returns dsn pointed at another database; dsn is a URL or a
// keyword/value string (where a later dbname wins).
func withDatabase(dsn, db string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		if u, err := url.Parse(dsn); err == nil {
			u.Path = "/" + db
			u.RawPath = ""
			return u.String()
		}
	}
	return dsn + " dbname=" + db
}

// pgBinDir returns a directory holding both initdb and postgres: the one on
// PATH, else the newest /usr/lib/postgresql/<version>/bin.
func pgBinDir() string {
	if p, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(p)
		if isExec(filepath.Join(dir, "postgres")) {
			return dir
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d
		}
	}
	return ""
}

func pgVersion(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

func isExec(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}
