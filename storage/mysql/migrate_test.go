package mysql_test

import (
	"context"
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
