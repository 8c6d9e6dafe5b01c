package service

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/fenceguard/fenceguard/storage/mysql"
	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/enforce"
)

// MySQLStore keeps items in the MySQL or MariaDB table items(sku
// VARBINARY(200) primary key, stock INT, fence_token BIGINT UNSIGNED), as
// [PostgresStore] does in PostgreSQL: fenced accesses are column-mode
// statements of package storage/mysql, which check and advance the row's
// own mark in the statement that makes the access (a fenced read is that
// claim, then the read). Nothing is written to fence_tokens: the
// middleware in front claims nothing (see [New]), and the store never
// deletes rows.
//
// The key column compares byte for byte with no padding (VARBINARY): under
// a case-insensitive or PAD SPACE collation, "Lamp" and "lamp " would be
// one row guarded by the locks of two different keys, so two holders could
// hold it at once.
type MySQLStore struct{ sqlStore }

// itemsDDL creates the items table of [MySQLStore]. The token column is
// what storage/mysql's column mode needs.
const itemsDDL = `CREATE TABLE IF NOT EXISTS items (
	sku VARBINARY(200) PRIMARY KEY,
	stock INT NOT NULL,
	fence_token BIGINT UNSIGNED NOT NULL DEFAULT 0
) ENGINE=InnoDB`

// erDupFieldName is MySQL's error for a column added twice.
const erDupFieldName = 1060

// NewMySQLStore creates what the store needs in db's database unless it
// exists — the items table with its token column, and storage/mysql's
// high-water table (Migrate) — and returns the store. An items table made
// before, without the token column, gets it; one whose sku column does
// not compare byte for byte is refused.
//
// log receives the audit record of every ResetMark; nil is slog.Default().
func NewMySQLStore(ctx context.Context, db *sql.DB, log *slog.Logger) (*MySQLStore, error) {
	if log == nil {
		log = slog.Default()
	}
	items, err := mysql.NewTable(mysql.TableOptions{Name: []string{"items"}, Key: "sku"})
	if err != nil {
		return nil, err
	}
	if err := mysql.Migrate(ctx, db); err != nil {
		return nil, fmt.Errorf("inventory: migrate: %w", err)
	}
	// Instances of the service start together over one database: MySQL
	// serializes their CREATE TABLE IF NOT EXISTS on the table name's
	// metadata lock, and a column two of them add is added once, the
	// other told it is there.
	if _, err := db.ExecContext(ctx, itemsDDL); err != nil {
		return nil, fmt.Errorf("inventory: create items: %w", err)
	}
	var hasToken bool
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) > 0 FROM information_schema.COLUMNS
 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'items' AND COLUMN_NAME = 'fence_token'`).Scan(&hasToken); err != nil {
		return nil, fmt.Errorf("inventory: items: %w", err)
	}
	if !hasToken {
		_, err := db.ExecContext(ctx, `ALTER TABLE items ADD COLUMN fence_token BIGINT UNSIGNED NOT NULL DEFAULT 0`)
		var me *gomysql.MySQLError
		if err != nil && !(errors.As(err, &me) && me.Number == erDupFieldName) {
			return nil, fmt.Errorf("inventory: add the token column to items: %w", err)
		}
	}
	// Verify asks of the key column what tombstones need, and the lock
	// keys too: one row for exactly the names that are one lock key.
	if err := items.Verify(ctx, db); err != nil {
		return nil, fmt.Errorf("inventory: items.sku: %w", err)
	}
	return &MySQLStore{sqlStore{
		r:     myRows{db: db, items: items, log: log},
		setup: "column-mode enforcer on the row (storage/mysql: the claim in each access's statement; httpmw checks the token first)",
	}}, nil
}

// myRows runs [MySQLStore]'s statements.
type myRows struct {
	db    *sql.DB
	items *mysql.Table
	log   *slog.Logger
}

func (m myRows) selectStock(ctx context.Context, sku string) (int, error) {
	var stock int
	err := m.db.QueryRowContext(ctx, `SELECT stock FROM items WHERE sku = ?`, sku).Scan(&stock)
	return stock, err
}

func (m myRows) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := m.db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (m myRows) updateStock(ctx context.Context, sku string, stock int) (int64, error) {
	return m.exec(ctx, `UPDATE items SET stock = ? WHERE sku = ?`, stock, sku)
}

func (m myRows) decrement(ctx context.Context, sku string) (int64, error) {
	return m.exec(ctx, `UPDATE items SET stock = stock - 1 WHERE sku = ? AND stock > 0`, sku)
}

func (m myRows) upsert(ctx context.Context, sku string, stock int) error {
	_, err := m.exec(ctx, `INSERT INTO items (sku, stock) VALUES (?, ?) ON DUPLICATE KEY UPDATE stock = ?`, sku, stock, stock)
	return err
}

func (m myRows) mark(ctx context.Context, sku string) (token.Token, error) {
	return m.items.HighWater(ctx, m.db, sku)
}

func (m myRows) ping(ctx context.Context) error { return m.db.PingContext(ctx) }

func (m myRows) readStock(ctx context.Context, sku string, t token.Token) (int, error) {
	var stock int
	err := m.items.Read(ctx, m.db, sku, t, []string{"stock"}, &stock)
	return stock, err
}

func (m myRows) setStock(ctx context.Context, sku string, stock int, t token.Token) error {
	return m.items.Update(ctx, m.db, sku, t, mysql.Set("stock", stock))
}

func (m myRows) sell(ctx context.Context, sku string, t token.Token) error {
	return m.items.Update(ctx, m.db, sku, t, mysql.Add("stock", -1), mysql.Where("stock > 0"))
}

// resetMark reads the row's mark under the row's lock and replaces it, in
// one transaction, and logs the change (enforce.LogReset).
func (m myRows) resetMark(ctx context.Context, sku string, to token.Token) (prev token.Token, err error) {
	if err := enforce.CheckReset(rowResource(sku), to); err != nil {
		return 0, err
	}
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	var cur uint64
	if err := tx.QueryRowContext(ctx, `SELECT fence_token FROM items WHERE sku = ? FOR UPDATE`, sku).Scan(&cur); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE items SET fence_token = ? WHERE sku = ?`, uint64(to), sku); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	enforce.LogReset(ctx, m.log, "inventory mysql store", rowResource(sku), token.Token(cur), to)
	return token.Token(cur), nil
}

func (myRows) noRow(err error) bool { return errors.Is(err, sql.ErrNoRows) }
