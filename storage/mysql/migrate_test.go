package mysql_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/storage/mysql"
)

// Migrate is idempotent and safe from many processes at once: the runs
// queue on the named lock, and each releases it.
func TestMigrateConcurrent(t *testing.T) {
	db := newDB(t)
	ctx := ctxFor(t, 2*time.Minute)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := mysql.Migrate(ctx, db); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := mysql.Migrate(ctx, db); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	var free int
	if err := db.QueryRowContext(ctx, "SELECT IS_FREE_LOCK('fenceguard.migrate')").Scan(&free); err != nil || free != 1 {
		t.Fatalf("the migration lock is held after Migrate returned (%d, %v)", free, err)
	}
}

// While another session holds the migration lock, Migrate waits until
// its context ends, says why, and creates nothing.
func TestMigrateWaitsForTheLock(t *testing.T) {
	db := newDB(t)
	ctx := ctxFor(t, time.Minute)
	holder, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	var got int
	if err := holder.QueryRowContext(ctx, "SELECT GET_LOCK('fenceguard.migrate', 10)").Scan(&got); err != nil || got != 1 {
		t.Fatalf("GET_LOCK = %d, %v", got, err)
	}
	short, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	err = mysql.Migrate(short, db)
	if err == nil || !strings.Contains(err.Error(), "fenceguard.migrate") {
		t.Fatalf("Migrate while the lock is held = %v, want an error naming the lock", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'fence_tokens'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("fence_tokens created without the lock (%d, %v)", n, err)
	}
	if _, err := holder.ExecContext(ctx, "DO RELEASE_LOCK('fenceguard.migrate')"); err != nil {
		t.Fatal(err)
	}
	if err := mysql.Migrate(ctx, db); err != nil {
		t.Fatalf("Migrate once the lock is free: %v", err)
	}
}

// Migrate keeps a high-water table that exists, so it checks that its
// token column holds every token: outside strict sql_mode a signed one
// stores 2^63+1000 as 2^63-1, and a claim at 2^63+1 then passes.
func TestMigrateRefusesATokenColumnNotBigintUnsigned(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	db := newDB(t, "sql_mode", "")
	for _, typ := range []string{"BIGINT", "INT UNSIGNED", "DECIMAL(20,0)"} {
		exec(t, db, `DROP TABLE IF EXISTS fence_tokens`,
			`CREATE TABLE fence_tokens (resource VARBINARY(767) PRIMARY KEY, token `+typ+` NOT NULL, updated_at DATETIME(6) NOT NULL)`)
		if err := mysql.Migrate(ctx, db); !errors.Is(err, mysql.ErrSchema) {
			t.Errorf("Migrate over a token column %s: %v, want ErrSchema", typ, err)
		}
	}
	exec(t, db, `DROP TABLE fence_tokens`)
	if err := mysql.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := mysql.Migrate(ctx, db); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
}
