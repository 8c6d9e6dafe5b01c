package pgserver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fenceguard/fenceguard/harness"
)

func TestPostgresSharedDatabases(t *testing.T) {
	t.Parallel()
	var got []*DB
	for _, name := range []string{"a", "b"} {
		t.Run(name, func(t *testing.T) {
			pg := Shared(t)
			c := pgConn(t, pg.DSN)
			ctx, cancel := ctxFor(10 * time.Second)
			defer cancel()
			db, err := queryValue(ctx, c, "SELECT current_database()")
			if err != nil {
				t.Fatal(err)
			}
			if db != pg.Database || !strings.HasPrefix(db, "fg_") {
				t.Fatalf("connected to %q, want %q (fg_…)", db, pg.Database)
			}
			// A table of one test is invisible to the other.
			if n, err := queryValue(ctx, c, "SELECT count(*) FROM pg_tables WHERE tablename = 'only_mine'"); err != nil || n != "0" {
				t.Fatalf("fresh database already has only_mine (%s, %v)", n, err)
			}
			if err := execSQL(ctx, c, "CREATE TABLE only_mine (v text); INSERT INTO only_mine VALUES ("+quoteLiteral(name)+")"); err != nil {
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
	c := pgConn(t, sharedAdmin())
	ctx, cancel := ctxFor(10 * time.Second)
	defer cancel()
	n, err := queryValue(ctx, c, "SELECT count(*) FROM pg_database WHERE datname IN ("+
		quoteLiteral(got[0].Database)+", "+quoteLiteral(got[1].Database)+")")
	if err != nil || n != "0" {
		t.Fatalf("%s test databases left after the tests ended (%v)", n, err)
	}
}

func TestPostgresFaults(t *testing.T) {
	t.Parallel()
	s := New(t)
	if DSN(s) == "" {
		t.Fatal("no DSN")
	}
	query := func() (string, error) {
		ctx, cancel := ctxFor(time.Second)
		defer cancel()
		c, err := pgConnect(ctx, DSN(s))
		if err != nil {
			return "", err
		}
		defer c.Close(context.Background())
		return queryValue(ctx, c, "SELECT count(*) FROM kept")
	}
	c := pgConn(t, DSN(s))
	ctx, cancel := ctxFor(10 * time.Second)
	defer cancel()
	if err := execSQL(ctx, c, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (1), (2)"); err != nil {
		t.Fatal(err)
	}
	checkShmVisible(t, s)

	// Pause: an open session gets no answer; Resume: it does again.
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	qctx, qcancel := ctxFor(300 * time.Millisecond)
	err := execSQL(qctx, c, "SELECT 1")
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
	ic := pgConn(t, DSN(s))
	ictx, icancel := ctxFor(10 * time.Second)
	defer icancel()
	if err := execSQL(ictx, ic, "INSERT INTO kept VALUES (3)"); err != nil {
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
	var pe *pgconn.PgError
	if _, err := query(); !errors.As(err, &pe) || pe.Code != "42P01" { // undefined_table
		t.Fatalf("after Start(true): %v, want undefined_table", err)
	}
}

func TestPostgresDuplicateDatabaseError(t *testing.T) {
	t.Parallel()
	pg := Shared(t)
	err := pgAdmin(sharedAdmin(), "CREATE DATABASE "+pgx.Identifier{pg.Database}.Sanitize())
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42P04" { // duplicate_database
		t.Fatalf("second CREATE DATABASE: %v, want SQLSTATE 42P04", err)
	}
}

// checkShmVisible: the harness reads a live postmaster's System V segment
// (key and attach count) the way its cleanup after a crash does.
func checkShmVisible(t *testing.T, s *harness.Server) {
	t.Helper()
	key, id := pgShm(t, s)
	gotKey, nattch, ok := shmStat(id)
	if shmCleanupSupported() && (!ok || gotKey != key || nattch == 0) {
		t.Fatalf("shmStat(%d) = key %d, %d attached, %v; want key %d, attached", id, gotKey, nattch, ok, key)
	}
}

// pgShm returns the key and id of a running postmaster's segment.
func pgShm(t *testing.T, s *harness.Server) (key int64, id int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.DataDir(), "postmaster.pid"))
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

// shmStat returns the key and attach count of System V shared memory
// segment id, as /proc/sysvipc/shm lists it; ok is false when it is gone.
func shmStat(id int) (key int64, nattch uint64, ok bool) {
	b, err := os.ReadFile("/proc/sysvipc/shm")
	if err != nil {
		return 0, 0, false
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line) // key shmid perms size cpid lpid nattch …
		if len(f) < 7 || f[1] != strconv.Itoa(id) {
			continue
		}
		key, _ = strconv.ParseInt(f[0], 10, 64)
		nattch, _ = strconv.ParseUint(f[6], 10, 64)
		return key, nattch, true
	}
	return 0, 0, false
}
