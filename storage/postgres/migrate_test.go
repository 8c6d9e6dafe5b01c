package postgres_test

import (
	"context"
	osexec "os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fenceguard/fenceguard/harness/pgserver"
	"github.com/fenceguard/fenceguard/storage/postgres"
)

// Several instances migrating at once, each on its own connection, on a
// database where nothing exists yet: all succeed, once each table.
func TestMigrateConcurrent(t *testing.T) {
	t.Parallel()
	pg := pgserver.Shared(t)
	ctx := ctxFor(t, time.Minute)
	custom, err := postgres.NewTokens(postgres.TokensOptions{Name: pgx.Identifier{"fencing", "marks"}})
	if err != nil {
		t.Fatal(err)
	}
	const instances = 8
	conns := make([]*pgx.Conn, instances)
	for i := range conns {
		c, err := pgx.Connect(ctx, pg.DSN)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		conns[i] = c
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			<-start
			migrate := postgres.Migrate
			if i%2 == 1 {
				migrate = custom.Migrate
			}
			if err := migrate(ctx, c); err != nil {
				t.Errorf("instance %d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	var n int
	err = conns[0].QueryRow(ctx, `SELECT count(*) FROM pg_tables
 WHERE (schemaname, tablename) IN (('public', 'fence_tokens'), ('fencing', 'marks'))`).Scan(&n)
	if err != nil || n != 2 {
		t.Fatalf("%d tables, %v; want 2", n, err)
	}
	// And again: idempotent, also inside a transaction.
	if err := postgres.Migrate(ctx, conns[0]); err != nil {
		t.Fatal(err)
	}
	tx, err := conns[0].Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := custom.Migrate(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// The package must never import text/template (nor html/template): a
// program that links it loses the linker's dead-method elimination, since
// the template engine can call any exported method by name.
func TestNoTemplateImport(t *testing.T) {
	t.Parallel()
	goBin, err := osexec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := osexec.Command(goBin, "list", "-deps", "github.com/fenceguard/fenceguard/storage/postgres").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 || !slices.Contains(deps, "github.com/jackc/pgx/v5") {
		t.Fatalf("go list -deps listed %d packages, without pgx: %q", len(deps), out)
	}
	for _, bad := range []string{"text/template", "html/template"} {
		if slices.Contains(deps, bad) {
			t.Errorf("storage/postgres depends on %s", bad)
		}
	}
}
