package mysqlserver

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceguard/fenceguard/harness"
)

func TestSharedDatabases(t *testing.T) {
	t.Parallel()
	var got []*DB
	for _, name := range []string{"a", "b"} {
		t.Run(name, func(t *testing.T) {
			db := Shared(t)
			c := conn(t, db.DSN)
			ctx, cancel := ctxFor(10 * time.Second)
			defer cancel()
			cur, err := queryValue(ctx, c, "SELECT DATABASE()")
			if err != nil {
				t.Fatal(err)
			}
			if cur != db.Database || !strings.HasPrefix(cur, "fg_") {
				t.Fatalf("connected to %q, want %q (fg_…)", cur, db.Database)
			}
			// A table of one test is invisible to the other.
			if n, err := queryValue(ctx, c, "SELECT count(*) FROM information_schema.tables WHERE table_name = 'only_mine'"); err != nil || n != "0" {
				t.Fatalf("only_mine exists already (%s, %v)", n, err)
			}
			if _, err := c.ExecContext(ctx, "CREATE TABLE only_mine (v text)"); err != nil {
				t.Fatal(err)
			}
			got = append(got, db)
		})
	}
	if len(got) != 2 {
		t.Fatal("subtests failed")
	}
	if got[0].Database == got[1].Database {
		t.Fatalf("both tests got database %s", got[0].Database)
	}
	// Their databases were dropped when they ended.
	sh, _, _ := shared.Load(startShared)
	c := conn(t, sh.admin)
	ctx, cancel := ctxFor(10 * time.Second)
	defer cancel()
	n, err := queryValue(ctx, c, "SELECT count(*) FROM information_schema.schemata WHERE schema_name IN (?, ?)", got[0].Database, got[1].Database)
	if err != nil || n != "0" {
		t.Fatalf("%s test databases left after the tests ended (%v)", n, err)
	}
}

func TestFaults(t *testing.T) {
	t.Parallel()
	s := New(t)
	if DSN(s) == "" {
		t.Fatal("no DSN")
	}
	checkSettings(t, s)
	query := func() (string, error) {
		ctx, cancel := ctxFor(2 * time.Second)
		defer cancel()
		c, err := open(DSN(s))
		if err != nil {
			return "", err
		}
		defer c.Close()
		return queryValue(ctx, c, "SELECT count(*) FROM test.kept")
	}
	c := conn(t, DSN(s))
	ctx, cancel := ctxFor(30 * time.Second)
	defer cancel()
	for _, q := range []string{"CREATE DATABASE test", "CREATE TABLE test.kept (v int) ENGINE=InnoDB", "INSERT INTO test.kept VALUES (1), (2)"} {
		if _, err := c.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	// Pause: an open session gets no answer; Resume: it does again.
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	qctx, qcancel := ctxFor(300 * time.Millisecond)
	_, err := c.ExecContext(qctx, "SELECT 1")
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
	if _, err := c.ExecContext(ctx, "INSERT INTO test.kept VALUES (3)"); err != nil {
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

	// Kill + Start(true): initialized anew.
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(true); err != nil {
		t.Fatal(err)
	}
	var me *mysql.MySQLError
	if _, err := query(); !errors.As(err, &me) || me.Number != 1146 { // ER_NO_SUCH_TABLE
		t.Fatalf("after Start(true): %v, want error 1146 (no such table)", err)
	}
}

// The server is the harness's own, not the machine's MariaDB: its data
// directory is the one the harness made, and it runs with the settings
// the harness gave it.
func checkSettings(t *testing.T, s *harness.Server) {
	t.Helper()
	c := conn(t, DSN(s))
	ctx, cancel := ctxFor(10 * time.Second)
	defer cancel()
	for q, want := range map[string]string{
		"SELECT @@datadir":                        s.DataDir() + "/",
		"SELECT @@port":                           strings.TrimPrefix(s.Addr(), "127.0.0.1:"),
		"SELECT @@bind_address":                   "127.0.0.1",
		"SELECT @@innodb_flush_log_at_trx_commit": "2",
		"SELECT @@character_set_server":           "utf8mb4",
	} {
		if got, err := queryValue(ctx, c, q); err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", q, got, err, want)
		}
	}
}
