package servers

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/internal/servers/internal/pgwire"
)

// PG is a test's own database on a PostgreSQL server. It is created for the
// test (CREATE DATABASE fg_…) and dropped when the test ends.
type PG struct {
	DSN      string  // connects to Database; pgx.Connect, pgxpool.New and libpq accept it
	Database string  // e.g. fg_1a2b3c_7
	Server   *Server // the process when the harness started it, else nil; no faults: it is shared
}

// Postgres returns a fresh database, for the calling test alone, on the
// package's shared PostgreSQL server (started on first use).
func Postgres(t testing.TB) *PG {
	t.Helper()
	return newDatabase(t, sharedPG.get(t, startSharedPG))
}

// newDatabase creates the calling test's database through sh's admin DSN and
// drops it when the test ends.
func newDatabase(t testing.TB, sh pgShared) *PG {
	t.Helper()
	pg, err := createDatabase(sh)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pgDropDatabase(sh.admin, pg.Database); err != nil {
			t.Logf("servers: dropping database %s: %v", pg.Database, err)
		}
	})
	return pg
}

// createDatabase makes a fresh database on sh.
func createDatabase(sh pgShared) (*PG, error) {
	db := "fg_" + runID + "_" + strconv.FormatInt(seq.Add(1), 10)
	if err := pgAdmin(sh.admin, "CREATE DATABASE "+pgwire.QuoteIdentifier(db)); err != nil {
		return nil, fmt.Errorf("servers: creating database %s: %w", db, err)
	}
	return &PG{DSN: withDatabase(sh.admin, db), Database: db, Server: sh.server}, nil
}

type pgShared struct {
	admin  string // DSN of a database to run CREATE DATABASE from
	server *Server
}

var sharedPG slot[pgShared]

func startSharedPG() (pgShared, string, error) {
	if dsn := os.Getenv(EnvPostgresDSN); dsn != "" {
		return pgShared{admin: dsn}, "", nil
	}
	if pgBinDir() != "" {
		k, err := newPGKind()
		if err != nil {
			return pgShared{}, "", err
		}
		s, err := launch(k, "postgres", 1)
		if err != nil {
			return pgShared{}, "", err
		}
		return pgShared{admin: s.DSN(), server: s}, "", nil
	}
	return pgShared{}, noServerMsg("PostgreSQL", EnvPostgresDSN, "postgresql"), nil
}

// NewPostgres starts a PostgreSQL server for the calling test alone, to
// inject faults into; it is torn down when the test ends. [Server.DSN] gives
// its connection string (user postgres, no password).
func NewPostgres(t testing.TB) *Server {
	t.Helper()
	requireMain(t)
	if pgBinDir() == "" {
		unavailable(t, noBinaryMsg("NewPostgres", "PostgreSQL (initdb, postgres)", "postgresql"))
	}
	k, err := newPGKind()
	if err != nil {
		t.Fatal(err)
	}
	s, err := launch(k, "postgres", 1)
	if err != nil {
		t.Fatal(err)
	}
	dedicated(t, s)
	return s
}

// DSN returns, for a PostgreSQL server, a URL connecting to its "postgres"
// database as the superuser postgres (trust authentication). For other kinds
// of server it returns "".
func (s *Server) DSN() string {
	if _, ok := s.kind.(*pgKind); !ok {
		return ""
	}
	return "postgres://postgres@" + s.Addr() + "/postgres?sslmode=disable"
}

// pgKind runs initdb and postgres as the postgres user when we are root
// (PostgreSQL refuses to run as root). The server is our direct child, so
// signals and the parent-death signal reach the postmaster itself.
type pgKind struct {
	bin      string              // directory with initdb and postgres
	cred     *syscall.Credential // nil: run as ourselves
	uid, gid int
}

func newPGKind() (*pgKind, error) {
	k := &pgKind{bin: pgBinDir(), uid: -1, gid: -1}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("servers: PostgreSQL refuses to run as root and there is no postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		k.uid, k.gid = uid, gid
		k.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	}
	return k, nil
}

func (k *pgKind) prepare(ctx context.Context, s *Server) error {
	if k.cred != nil {
		if err := os.Chown(s.dir, k.uid, k.gid); err != nil {
			return err
		}
	}
	if _, err := os.Stat(filepath.Join(s.dataDir(), "PG_VERSION")); err == nil {
		return nil
	}
	cmd := exec.CommandContext(ctx, filepath.Join(k.bin, "initdb"),
		"-D", s.dataDir(), "-A", "trust", "-U", "postgres", "--no-sync",
		"-E", "UTF8", "--locale=C")
	cmd.Dir = "/" // the postgres user may not enter our working directory
	cmd.SysProcAttr = sysProcAttr(k.cred)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	return nil
}

func (k *pgKind) command(s *Server) (*exec.Cmd, error) {
	cmd := exec.Command(filepath.Join(k.bin, "postgres"),
		"-D", s.dataDir(),
		"-p", strconv.Itoa(s.port),
		"-k", s.dir,
		"-c", "listen_addresses=127.0.0.1",
		// Committed data must survive Kill (a process crash) as it would on a
		// real server; only a machine crash may lose it. So no
		// synchronous_commit=off: it acknowledges commits still in shared memory.
		"-c", "fsync=off",
		"-c", "max_connections=200",
		"-c", "shared_buffers=64MB",
	)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: k.cred}
	return cmd, nil
}

// probe logs in for real and checks that the server answering is ours.
func (k *pgKind) probe(s *Server, pid int) (func(context.Context) error, func()) {
	return func(ctx context.Context) error {
		conn, err := pgwire.Connect(ctx, s.DSN())
		if err != nil {
			return err // 57P03 "the database system is starting up" included
		}
		defer conn.Close()
		dir, err := conn.QueryValue(ctx, "SHOW data_directory")
		if err != nil {
			return err
		}
		if dir != s.dataDir() {
			return fmt.Errorf("%w: the server on %s serves %s", errPortTaken, s.Addr(), dir)
		}
		return nil
	}, func() {}
}

// stopSignal is PostgreSQL's "fast" shutdown: abort sessions, checkpoint, exit.
func (*pgKind) stopSignal() syscall.Signal { return syscall.SIGINT }

// gracefulTeardown lets the postmaster remove its shared memory.
func (*pgKind) gracefulTeardown() bool { return true }
func (*pgKind) canWipe(*Server) error  { return nil }

// pgAdmin runs one statement on its own short-lived connection (tests
// create databases in parallel).
func pgAdmin(dsn, stmt string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgwire.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Exec(ctx, stmt)
}

// pgDropDatabase drops db, ending its sessions first (WITH (FORCE), from
// PostgreSQL 13 on; older servers answer syntax_error and get a plain DROP).
func pgDropDatabase(admin, db string) error {
	q := "DROP DATABASE IF EXISTS " + pgwire.QuoteIdentifier(db)
	err := pgAdmin(admin, q+" WITH (FORCE)")
	var pe *pgwire.Error
	if errors.As(err, &pe) && pe.Code == pgwire.CodeSyntaxError {
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
