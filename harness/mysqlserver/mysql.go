package mysqlserver

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceguard/fenceguard/harness"
)

// EnvDSN is the data source name of a MySQL or MariaDB server whose user
// may CREATE DATABASE, in go-sql-driver/mysql's form, for the shared
// helper, e.g. root:secret@tcp(127.0.0.1:3306)/.
const EnvDSN = "FENCEGUARD_MYSQL_DSN"

// debPkg is the Debian package with the server binaries.
const debPkg = "mariadb-server"

// DB is a test's own database on a MySQL or MariaDB server. It is created
// for the test (CREATE DATABASE fg_…) and dropped when the test ends.
type DB struct {
	DSN      string          // connects to Database; sql.Open("mysql", DSN)
	Database string          // e.g. fg_1a2b3c_7
	Server   *harness.Server // the process when the harness started it, else nil; no faults: it is shared
}

// Shared returns a fresh database, for the calling test alone, on the
// package's shared server (started on first use).
func Shared(t testing.TB) *DB {
	t.Helper()
	sh := shared.Get(t, startShared)
	db, err := createDatabase(sh)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := admin(sh.admin, "DROP DATABASE IF EXISTS `"+db.Database+"`"); err != nil {
			t.Logf("mysqlserver: dropping database %s: %v", db.Database, err)
		}
	})
	return db
}

// ExamplesNeed declares that the package's Example functions use the shared
// server ([Example]); call it from TestMain before harness.Main.
func ExamplesNeed() {
	harness.ExamplesNeed("MariaDB", func() (string, error) {
		_, skip, err := shared.Load(startShared)
		return skip, err
	})
}

// Example returns a fresh database for the calling Example function on the
// package's shared server. It is dropped with the server at the end of the
// package (on a server from the environment it stays).
func Example() *DB {
	_ = harness.ExampleID() // checks Main
	sh, skip, err := shared.Load(startShared)
	if skip != "" || err != nil {
		harness.ExampleUnavailable("MariaDB", skip, err)
	}
	db, err := createDatabase(sh)
	if err != nil {
		harness.ExampleUnavailable("MariaDB", "", err)
	}
	return db
}

// createDatabase makes a fresh database on sh.
func createDatabase(sh sharedServer) (*DB, error) {
	name := "fg_" + strings.ReplaceAll(harness.UniqueID(), "-", "_")
	if err := admin(sh.admin, "CREATE DATABASE `"+name+"`"); err != nil {
		return nil, fmt.Errorf("mysqlserver: creating database %s: %w", name, err)
	}
	dsn, err := withDatabase(sh.admin, name)
	if err != nil {
		return nil, err
	}
	return &DB{DSN: dsn, Database: name, Server: sh.server}, nil
}

type sharedServer struct {
	admin  string // DSN to run CREATE DATABASE with
	server *harness.Server
}

var shared harness.Shared[sharedServer]

func startShared() (sharedServer, string, error) {
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		if _, err := mysql.ParseDSN(dsn); err != nil {
			return sharedServer{}, "", fmt.Errorf("mysqlserver: %s: %w", EnvDSN, err)
		}
		return sharedServer{admin: dsn}, "", nil
	}
	k, ok := newKind()
	if !ok {
		return sharedServer{}, harness.NoServerMessage("MySQL or MariaDB", EnvDSN, debPkg), nil
	}
	s, err := harness.Launch(k, "mariadb", 1)
	if err != nil {
		return sharedServer{}, "", err
	}
	return sharedServer{admin: DSN(s), server: s}, "", nil
}

// New starts a MariaDB server for the calling test alone, to inject faults
// into; it is torn down when the test ends. [DSN] gives its data source
// name (user root, no password).
func New(t testing.TB) *harness.Server {
	t.Helper()
	harness.RequireMain(t)
	k, ok := newKind()
	if !ok {
		harness.SkipOrFail(t, harness.NoBinaryMessage("mysqlserver.New", "MariaDB (mariadb-install-db, mariadbd)", debPkg))
	}
	s, err := harness.Launch(k, "mariadb", 1)
	if err != nil {
		t.Fatal(err)
	}
	harness.Cleanup(t, s)
	return s
}

// Start starts a throwaway MariaDB server for a program rather than a test,
// the way the tests get theirs: a new data directory under /tmp, a free
// loopback port. [DSN] gives its data source name (user root, no password,
// loopback only). The caller must call [harness.Server.Close]; see
// [harness.LaunchProgram].
//
// It fails with an error wrapping [harness.ErrNotInstalled] when there is
// no local install; the environment is not considered.
func Start(ctx context.Context) (*harness.Server, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	k, ok := newKind()
	if !ok {
		return nil, fmt.Errorf("%w: MariaDB (mariadb-install-db and mariadbd, Debian package %s)", harness.ErrNotInstalled, debPkg)
	}
	k.fromTemplate = false // no harness.Main to remove a template
	return harness.LaunchProgram(ctx, k, "mariadb", 1)
}

// DSN returns, for a server of this package ([New], [Start]), the data
// source name of its user root (no password) with no default database, in
// go-sql-driver/mysql's form. For other kinds of server it returns "".
func DSN(s *harness.Server) string {
	if _, ok := s.Kind().(*kind); !ok {
		return ""
	}
	return "root@tcp(" + s.Addr() + ")/"
}

// kind runs mariadb-install-db and mariadbd. The server is our direct
// child (one process), so signals and the parent-death signal reach it.
type kind struct {
	install, server string // the binaries
	// fromTemplate: copy the data directory of a new server from the
	// test process's template rather than run mariadb-install-db for
	// each (see template).
	fromTemplate bool
}

func newKind() (*kind, bool) {
	k := &kind{
		install:      harness.FindBinary("mariadb-install-db", "/usr/bin/mariadb-install-db"),
		server:       harness.FindBinary("mariadbd", "/usr/sbin/mariadbd"),
		fromTemplate: true,
	}
	return k, k.install != "" && k.server != ""
}

// The template is a data directory made once per test process with
// mariadb-install-db (seconds of CPU on a loaded machine) and copied for
// every server after (milliseconds). It lives in the process's harness
// directory, which harness.Main removes. A program ([Start]) has no Main
// and installs each server's directory itself.
var template struct {
	mu  sync.Mutex
	dir string // set once made
}

// templateDir returns the template, making it on first use; a failure is
// not kept, the next server tries again.
func (k *kind) templateDir(ctx context.Context) (string, error) {
	template.mu.Lock()
	defer template.mu.Unlock()
	if template.dir != "" {
		return template.dir, nil
	}
	parent, err := harness.TempDir("mariadb-template-")
	if err != nil {
		return "", err
	}
	dir := filepath.Join(parent, "data")
	if err := k.installDB(ctx, dir, parent); err != nil {
		os.RemoveAll(parent)
		return "", err
	}
	template.dir = dir
	return dir, nil
}

// installDB creates a data directory at dir with mariadb-install-db, run
// from workDir, which also holds its temporary files.
func (k *kind) installDB(ctx context.Context, dir, workDir string) error {
	tmp, err := tmpDir(workDir)
	if err != nil {
		return err
	}
	args := append([]string{"--no-defaults", "--datadir=" + dir, "--tmpdir=" + tmp}, asRoot()...)
	args = append(args, "--auth-root-authentication-method=normal", "--skip-test-db",
		"--skip-name-resolve")
	args = append(args, storageOptions...)
	cmd := exec.CommandContext(ctx, k.install, args...)
	cmd.Dir = workDir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mariadb-install-db: %w\n%s", err, out)
	}
	return nil
}

// storageOptions are the InnoDB settings a data directory is created
// with; the server must be started with the same ones. Small, for tests:
// a server idles at about 90 MB.
var storageOptions = []string{
	"--innodb-data-file-path=ibdata1:10M:autoextend",
	"--innodb-log-file-size=8M",
	"--innodb-buffer-pool-size=32M",
}

// asRoot is the option mariadbd and mariadb-install-db need to run as
// root, which they refuse by default; as any other user they run as that
// user.
func asRoot() []string {
	if os.Geteuid() == 0 {
		return []string{"--user=root"}
	}
	return nil
}

func (k *kind) Prepare(ctx context.Context, s *harness.Server) error {
	if _, err := os.Stat(filepath.Join(s.DataDir(), "mysql")); err == nil {
		return nil
	}
	// A half-made directory of an earlier attempt is made again.
	if err := os.RemoveAll(s.DataDir()); err != nil {
		return err
	}
	if !k.fromTemplate {
		return k.installDB(ctx, s.DataDir(), s.Dir())
	}
	tmpl, err := k.templateDir(ctx)
	if err != nil {
		return err
	}
	if err := os.CopyFS(s.DataDir(), os.DirFS(tmpl)); err != nil {
		os.RemoveAll(s.DataDir())
		return fmt.Errorf("copying the data directory template: %w", err)
	}
	return nil
}

// tmpDir returns dir/tmp, made if need be: a server's temporary files
// stay in its own directory, away from other servers' and the machine's.
func tmpDir(dir string) (string, error) {
	tmp := filepath.Join(dir, "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return "", err
	}
	return tmp, nil
}

func (k *kind) Command(s *harness.Server) (*exec.Cmd, error) {
	tmp, err := tmpDir(s.Dir())
	if err != nil {
		return nil, err
	}
	args := append([]string{"--no-defaults", // must come first
		"--datadir=" + s.DataDir(),
		"--tmpdir=" + tmp,
		"--port=" + strconv.Itoa(s.Port()),
		"--bind-address=127.0.0.1",
		"--socket=" + filepath.Join(s.Dir(), "sock"),
		"--pid-file=" + filepath.Join(s.Dir(), "mariadbd.pid"),
	}, asRoot()...)
	args = append(args, storageOptions...)
	args = append(args,
		"--skip-name-resolve",
		// Committed data must survive Kill (a process crash) as it would on
		// a real server: the log reaches the operating system at every
		// commit, only its flush to disk is once a second.
		"--innodb-flush-log-at-trx-commit=2",
		"--innodb-doublewrite=0",
		"--skip-log-bin",
		"--max-connections=300",
		"--character-set-server=utf8mb4",
	)
	cmd := exec.Command(k.server, args...)
	cmd.Dir = s.Dir()
	return cmd, nil
}

// Ready logs in for real and checks that the server answering is ours.
func (k *kind) Ready(ctx context.Context, s *harness.Server, pid int) error {
	db, err := open(DSN(s))
	if err != nil {
		return err
	}
	defer db.Close()
	var dir string
	if err := db.QueryRowContext(ctx, "SELECT @@datadir").Scan(&dir); err != nil {
		return err
	}
	if filepath.Clean(dir) != s.DataDir() {
		return fmt.Errorf("%w: the server on %s serves %s", harness.ErrPortTaken, s.Addr(), dir)
	}
	return nil
}

// StopSignal is mariadbd's normal shutdown.
func (*kind) StopSignal() syscall.Signal { return syscall.SIGTERM }

// GracefulTeardown is false: nothing of a server outlives its process and
// its directory.
func (*kind) GracefulTeardown() bool        { return false }
func (*kind) CanWipe(*harness.Server) error { return nil }

// open returns a pool of at most one connection to dsn.
func open(dsn string) (*sql.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 5 * time.Second
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(1)
	return db, nil
}

// admin runs one statement on its own short-lived connection (tests create
// databases in parallel).
func admin(dsn, stmt string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := open(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, stmt)
	return err
}

// withDatabase returns dsn with db as its default database.
func withDatabase(dsn, db string) (string, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("mysqlserver: %w", err)
	}
	cfg.DBName = db
	return cfg.FormatDSN(), nil
}
