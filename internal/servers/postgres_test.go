package servers

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/internal/servers/internal/pgwire"
)

func TestPostgresSharedDatabases(t *testing.T) {
	t.Parallel()
	var got []*PG
	for _, name := range []string{"a", "b"} {
		t.Run(name, func(t *testing.T) {
			pg := Postgres(t)
			c := pgConn(t, pg.DSN)
			ctx, cancel := ctxFor(10 * time.Second)
			defer cancel()
			db, err := c.QueryValue(ctx, "SELECT current_database()")
			if err != nil {
				t.Fatal(err)
			}
			if db != pg.Database || !strings.HasPrefix(db, "fg_") {
				t.Fatalf("connected to %q, want %q (fg_…)", db, pg.Database)
			}
			// A table of one test is invisible to the other.
			if n, err := c.QueryValue(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 'only_mine'"); err != nil || n != "0" {
				t.Fatalf("fresh database already has only_mine (%s, %v)", n, err)
			}
			if err := c.Exec(ctx, "CREATE TABLE only_mine (v text); INSERT INTO only_mine VALUES ("+pgwire.QuoteLiteral(name)+")"); err != nil {
				t.Fatal(err)
			}
			got = append(got, pg)
		})
	}
	if len(got) != 2 {
		t.Fatal("subtests failed")
	}
	if got[0].Database == got[1].Database {
		t.Fatalf("both tests got database %s", got[0].Database)
	}
	// Their databases were dropped when they ended.
	c := pgConn(t, sharedPG.val.admin)
	ctx, cancel := ctxFor(10 * time.Second)
	defer cancel()
	n, err := c.QueryValue(ctx, "SELECT count(*) FROM pg_database WHERE datname IN ("+
		pgwire.QuoteLiteral(got[0].Database)+", "+pgwire.QuoteLiteral(got[1].Database)+")")
	if err != nil || n != "0" {
		t.Fatalf("%s test databases left after the tests ended (%v)", n, err)
	}
}

func TestPostgresFaults(t *testing.T) {
	t.Parallel()
	s := NewPostgres(t)
	if s.DSN() == "" {
		t.Fatal("no DSN")
	}
	query := func() (string, error) {
		ctx, cancel := ctxFor(time.Second)
		defer cancel()
		c, err := pgConnect(ctx, s.DSN())
		if err != nil {
			return "", err
		}
		defer c.Close()
		return c.QueryValue(ctx, "SELECT count(*) FROM kept")
	}
	c := pgConn(t, s.DSN())
	ctx, cancel := ctxFor(10 * time.Second)
	defer cancel()
	if err := c.Exec(ctx, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (1), (2)"); err != nil {
		t.Fatal(err)
	}
	checkShmVisible(t, s)

	// Pause: an open session gets no answer; Resume: it does again.
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	qctx, qcancel := ctxFor(300 * time.Millisecond)
	err := c.Exec(qctx, "SELECT 1")
	qcancel()
	if err == nil {
		t.Fatal("query answered while the server was paused")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "query after Resume", func() error { _, err := query(); return err })

	// Kill (crash) right after a commit: queries fail; Start(false) recovers
	// every committed row.
	ic := pgConn(t, s.DSN())
	ictx, icancel := ctxFor(10 * time.Second)
	defer icancel()
	if err := ic.Exec(ictx, "INSERT INTO kept VALUES (3)"); err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := query(); err == nil {
		t.Fatal("query answered after Kill")
	}
	if err := s.Start(false); err != nil {
		t.Fatal(err)
	}
	if n, err := query(); err != nil || n != "3" {
		t.Fatalf("after Kill+Start(false): count = %s, %v; want 3", n, err)
	}

	// Stop (graceful) + Start(false) keeps the data too.
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := query(); err == nil {
		t.Fatal("query answered after Stop")
	}
	if err := s.Start(false); err != nil {
		t.Fatal(err)
	}
	if n, err := query(); err != nil || n != "3" {
		t.Fatalf("after Stop+Start(false): count = %s, %v; want 3", n, err)
	}

	// Kill + Start(true): initialized anew, and the killed postmaster's
	// shared memory segment does not outlive its data directory.
	_, shmid := pgShm(t, s)
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(true); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := shmStat(shmid); ok && shmCleanupSupported() {
		t.Errorf("shared memory segment %d of the killed postmaster left behind", shmid)
	}
	var pe *pgwire.Error
	if _, err := query(); !errors.As(err, &pe) || pe.Code != "42P01" { // undefined_table
		t.Fatalf("after Start(true): %v, want undefined_table", err)
	}
}

// A server from FENCEGUARD_PG_DSN may want a password, and TLS: the harness's
// client logs in with each method PostgreSQL offers for passwords, and
// creates and drops a test's database through such a DSN.
func TestPostgresPasswordsAndTLS(t *testing.T) {
	t.Parallel()
	s := NewPostgres(t)
	host, port := "127.0.0.1", strconv.Itoa(s.port)
	rootPEM := pgEnableTLSAndPasswords(t, s)
	dsn := func(user, password, extra string) string {
		quoted := "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(password) + "'" // libpq's quoting
		return "host=" + host + " port=" + port + " dbname=postgres user=" + user +
			" password=" + quoted + " " + extra
	}
	login := func(dsn string) error {
		ctx, cancel := ctxFor(10 * time.Second)
		defer cancel()
		c, err := pgConnect(ctx, dsn)
		if err != nil {
			return err
		}
		defer c.Close()
		return c.Exec(ctx, "SELECT 1")
	}
	for _, c := range []struct {
		name     string
		dsn      string
		wantCode string // "" is success; "any" any failure
	}{
		// hba method password: the password goes in clear text.
		{"cleartext", dsn("fg_clear", "pw clear", "sslmode=disable"), ""},
		{"cleartext wrong", dsn("fg_clear", "nope", "sslmode=disable"), pgwire.CodeInvalidPassword},
		{"md5", dsn("fg_md5", "pw md5", "sslmode=disable"), ""},
		{"md5 wrong", dsn("fg_md5", "nope", "sslmode=disable"), pgwire.CodeInvalidPassword},
		{"scram", dsn("fg_scram", "pw 'scram'", "sslmode=disable"), ""},
		{"scram wrong", dsn("fg_scram", "nope", "sslmode=disable"), pgwire.CodeInvalidPassword},
		// fg_tls may log in over TLS only (hostnossl … reject).
		{"tls refused in clear", dsn("fg_tls", "pw tls", "sslmode=disable"), "28000"},
		{"tls prefer", dsn("fg_tls", "pw tls", ""), ""},
		{"tls require", dsn("fg_tls", "pw tls", "sslmode=require"), ""},
		{"tls verify-ca", dsn("fg_tls", "pw tls", "sslmode=verify-ca sslrootcert="+rootPEM), ""},
		// The certificate names localhost, not 127.0.0.1.
		{"tls verify-full wrong name", dsn("fg_tls", "pw tls", "sslmode=verify-full sslrootcert="+rootPEM), "any"},
		{"tls verify-full", strings.Replace(dsn("fg_tls", "pw tls", "sslmode=verify-full sslrootcert="+rootPEM), "host=127.0.0.1", "host=localhost", 1), ""},
	} {
		err := login(c.dsn)
		var pe *pgwire.Error
		switch {
		case c.wantCode == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.wantCode == "any" && err == nil:
			t.Errorf("%s: logged in", c.name)
		case c.wantCode != "" && c.wantCode != "any" && (!errors.As(err, &pe) || pe.Code != c.wantCode):
			t.Errorf("%s: %v, want SQLSTATE %s", c.name, err, c.wantCode)
		}
	}

	// A test's database through a password DSN, as from FENCEGUARD_PG_DSN.
	admin := "postgres://fg_scram:" + "pw%20%27scram%27" + "@" + s.Addr() + "/postgres?sslmode=disable"
	var pg *PG
	t.Run("database", func(t *testing.T) {
		pg = newDatabase(t, pgShared{admin: admin})
		c := pgConn(t, pg.DSN)
		ctx, cancel := ctxFor(10 * time.Second)
		defer cancel()
		if db, err := c.QueryValue(ctx, "SELECT current_database()"); err != nil || db != pg.Database {
			t.Fatalf("current_database() = %q, %v; want %s", db, err, pg.Database)
		}
	})
	if pg == nil {
		t.FailNow()
	}
	c := pgConn(t, s.DSN())
	ctx, cancel := ctxFor(10 * time.Second)
	defer cancel()
	if n, err := c.QueryValue(ctx, "SELECT count(*) FROM pg_database WHERE datname = "+pgwire.QuoteLiteral(pg.Database)); err != nil || n != "0" {
		t.Fatalf("database %s left after its test (%s, %v)", pg.Database, n, err)
	}
}

func TestPostgresDuplicateDatabaseError(t *testing.T) {
	t.Parallel()
	pg := Postgres(t)
	err := pgAdmin(sharedPG.val.admin, "CREATE DATABASE "+pgwire.QuoteIdentifier(pg.Database))
	var pe *pgwire.Error
	if !errors.As(err, &pe) || pe.Code != pgwire.CodeDuplicateDatabase {
		t.Fatalf("second CREATE DATABASE: %v, want SQLSTATE %s", err, pgwire.CodeDuplicateDatabase)
	}
}

// checkShmVisible: the harness reads a live postmaster's System V segment
// (key and attach count) the way its cleanup after a crash does.
func checkShmVisible(t *testing.T, s *Server) {
	t.Helper()
	key, id := pgShm(t, s)
	gotKey, nattch, ok := shmStat(id)
	if shmCleanupSupported() && (!ok || gotKey != key || nattch == 0) {
		t.Fatalf("shmStat(%d) = key %d, %d attached, %v; want key %d, attached", id, gotKey, nattch, ok, key)
	}
}

// pgShm returns the key and id of a running postmaster's segment.
func pgShm(t *testing.T, s *Server) (key int64, id int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.dataDir(), "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 7 || len(strings.Fields(lines[6])) != 2 {
		t.Fatalf("postmaster.pid has no shared memory line:\n%s", b)
	}
	f := strings.Fields(lines[6])
	key, _ = strconv.ParseInt(f[0], 10, 64)
	id, _ = strconv.Atoi(f[1])
	return key, id
}

func shmCleanupSupported() bool {
	return runtime.GOOS == "linux" && (runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64")
}
