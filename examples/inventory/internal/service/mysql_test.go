package service_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"testing"

	"github.com/fenceguard/fenceguard/examples/inventory/internal/service"
	"github.com/fenceguard/fenceguard/harness/mysqlserver"
	"github.com/fenceguard/fenceguard/storage/mysql"
)

// An items table made before, without the token column, gets it and keeps
// its rows; one whose sku column folds case or pads is refused, since two
// lock keys would then guard one row.
func TestMySQLStoreSchema(t *testing.T) {
	ctx := context.Background()
	open := func(t *testing.T, ddl ...string) (*sql.DB, error) {
		t.Helper()
		db, err := sql.Open("mysql", mysqlserver.Shared(t).DSN)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		for _, q := range ddl {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		_, err = service.NewMySQLStore(ctx, db, slog.New(slog.DiscardHandler))
		return db, err
	}
	t.Run("token column added", func(t *testing.T) {
		db, err := open(t, `CREATE TABLE items (sku VARBINARY(200) PRIMARY KEY, stock INT NOT NULL)`,
			`INSERT INTO items VALUES ('lamp', 4)`)
		if err != nil {
			t.Fatal(err)
		}
		var stock int
		var mark uint64
		if err := db.QueryRowContext(ctx, `SELECT stock, fence_token FROM items WHERE sku = 'lamp'`).Scan(&stock, &mark); err != nil || stock != 4 || mark != 0 {
			t.Fatalf("lamp after the migration: stock %d, mark %d, %v; want 4, 0", stock, mark, err)
		}
		s, err := service.NewMySQLStore(ctx, db, nil) // a second start finds it all there
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Sell(ctx, "lamp", 7); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("case-insensitive key refused", func(t *testing.T) {
		_, err := open(t, `CREATE TABLE items (sku VARCHAR(200) COLLATE utf8mb4_general_ci PRIMARY KEY, stock INT NOT NULL,
			fence_token BIGINT UNSIGNED NOT NULL DEFAULT 0)`)
		if !errors.Is(err, mysql.ErrSchema) {
			t.Fatalf("NewMySQLStore: %v, want an error wrapping mysql.ErrSchema", err)
		}
	})
}
