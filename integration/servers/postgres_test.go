package servers

import (
	"context"
	"strings"
	"testing"
	"time"
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
			var db string
			if err := c.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
				t.Fatal(err)
			}
			if db != pg.Database || !strings.HasPrefix(db, "fg_") {
				t.Fatalf("connected to %q, want %q (fg_…)", db, pg.Database)
			}
			// A table of one test is invisible to the other.
			var n int
			if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 'only_mine'").Scan(&n); err != nil || n != 0 {
				t.Fatalf("fresh database already has only_mine (%d, %v)", n, err)
			}
			if _, err := c.Exec(ctx, "CREATE TABLE only_mine (v text); INSERT INTO only_mine VALUES ('"+name+"')"); err != nil {
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
	admin := sharedPG.val.admin
	c := pgConn(t, admin)
	ctx, cancel := ctxFor(10 * time.Second)
	defer cancel()
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1 OR datname = $2", got[0].Database, got[1].Database).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d test databases left after the tests ended (%v)", n, err)
	}
}

func TestPostgresFaults(t *testing.T) {
	t.Parallel()
	s := NewPostgres(t)
	if s.DSN() == "" {
		t.Fatal("no DSN")
	}
	query := func() (int, error) {
		ctx, cancel := ctxFor(time.Second)
		defer cancel()
		c, err := pgConnect(ctx, s.DSN())
		if err != nil {
			return 0, err
		}
		defer c.Close(ctx)
		var n int
		err = c.QueryRow(ctx, "SELECT count(*) FROM kept").Scan(&n)
		return n, err
	}
	c := pgConn(t, s.DSN())
	ctx, cancel := ctxFor(10 * time.Second)
	defer cancel()
	if _, err := c.Exec(ctx, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (1), (2)"); err != nil {
		t.Fatal(err)
	}

	// Pause: an open session gets no answer; Resume: it does again.
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	qctx, qcancel := ctxFor(300 * time.Millisecond)
	_, err := c.Exec(qctx, "SELECT 1")
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
	if _, err := query(); err != nil {
		t.Fatal(err)
	}
	ictx, icancel := ctxFor(5 * time.Second)
	defer icancel()
	ic, err := pgConnect(ictx, s.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer ic.Close(context.Background())
	if _, err := ic.Exec(ictx, "INSERT INTO kept VALUES (3)"); err != nil {
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
	if n, err := query(); err != nil || n != 3 {
		t.Fatalf("after Kill+Start(false): count = %d, %v; want 3", n, err)
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
	if n, err := query(); err != nil || n != 3 {
		t.Fatalf("after Stop+Start(false): count = %d, %v; want 3", n, err)
	}
}
