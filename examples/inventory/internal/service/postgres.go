package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// DB is what [PostgresStore] needs of a database: a *pgxpool.Pool (safe for
// concurrent use; a single connection is not).
type DB interface {
	postgres.DB
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Ping(ctx context.Context) error
}

// PostgresStore keeps items in the PostgreSQL table items(sku text primary
// key, stock integer, fence_token bigint). Fenced accesses are column-mode
// statements of package storage/postgres: the claim and the read, or the
// claim and the write, are one statement on the row — one commit per
// request, and the mark lives only in rows that exist. Nothing is written
// to fence_tokens: the middleware in front claims nothing (see [New]), and
// the store never deletes rows, which is what Table's tombstones there are
// for.
type PostgresStore struct{ sqlStore }

// NewPostgresStore creates what the store needs in db unless it exists — the
// items table with its token column, and storage/postgres's own tables
// (Migrate) — and returns the store.
func NewPostgresStore(ctx context.Context, db DB) (*PostgresStore, error) {
	items, err := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "sku"})
	if err != nil {
		return nil, err
	}
	if err := postgres.Migrate(ctx, db); err != nil {
		return nil, fmt.Errorf("inventory: migrate: %w", err)
	}
	// Instances of the service start together over one database: the
	// advisory lock makes their CREATEs queue instead of racing (two
	// concurrent CREATE TABLE IF NOT EXISTS can fail on the catalog's
	// unique index). One query string with no arguments runs in one
	// implicit transaction, so the lock ("fg-items") holds until the CREATE
	// is done.
	if _, err := db.Exec(ctx, `SELECT pg_advisory_xact_lock(7378916445417467251); CREATE TABLE IF NOT EXISTS items (sku text PRIMARY KEY, stock integer NOT NULL)`); err != nil {
		return nil, fmt.Errorf("inventory: create items: %w", err)
	}
	if err := items.AddTokenColumn(ctx, db); err != nil {
		return nil, fmt.Errorf("inventory: %w", err)
	}
	return &PostgresStore{sqlStore{
		r:     pgRows{db: db, items: items},
		setup: "column-mode enforcer on the row (one statement per access; httpmw checks the token first)",
	}}, nil
}

// pgRows runs [PostgresStore]'s statements.
type pgRows struct {
	db    DB
	items *postgres.Table
}

func (p pgRows) selectStock(ctx context.Context, sku string) (int, error) {
	var stock int
	err := p.db.QueryRow(ctx, `SELECT stock FROM items WHERE sku = $1`, sku).Scan(&stock)
	return stock, err
}

func (p pgRows) updateStock(ctx context.Context, sku string, stock int) (int64, error) {
	tag, err := p.db.Exec(ctx, `UPDATE items SET stock = $2 WHERE sku = $1`, sku, stock)
	return tag.RowsAffected(), err
}

func (p pgRows) decrement(ctx context.Context, sku string) (int64, error) {
	tag, err := p.db.Exec(ctx, `UPDATE items SET stock = stock - 1 WHERE sku = $1 AND stock > 0`, sku)
	return tag.RowsAffected(), err
}

func (p pgRows) upsert(ctx context.Context, sku string, stock int) error {
	_, err := p.db.Exec(ctx, `INSERT INTO items (sku, stock) VALUES ($1, $2)
		ON CONFLICT (sku) DO UPDATE SET stock = EXCLUDED.stock`, sku, stock)
	return err
}

func (p pgRows) mark(ctx context.Context, sku string) (token.Token, error) {
	var mark token.Token
	err := p.db.QueryRow(ctx, `SELECT fence_token FROM items WHERE sku = $1`, sku).Scan(&mark)
	return mark, err
}

func (p pgRows) ping(ctx context.Context) error { return p.db.Ping(ctx) }

func (p pgRows) readStock(ctx context.Context, sku string, t token.Token) (int, error) {
	var stock int
	err := p.items.Read(ctx, p.db, sku, t, []string{"stock"}, &stock)
	return stock, err
}

func (p pgRows) setStock(ctx context.Context, sku string, stock int, t token.Token) error {
	return p.items.Update(ctx, p.db, sku, t, postgres.Set("stock", stock))
}

func (p pgRows) sell(ctx context.Context, sku string, t token.Token) error {
	return p.items.Update(ctx, p.db, sku, t, postgres.Add("stock", -1), postgres.Where("stock > 0"))
}

// resetMark resets the row's own mark (and its tombstone, if the row was
// deleted), logged by storage/postgres.
func (p pgRows) resetMark(ctx context.Context, sku string, to token.Token) (token.Token, error) {
	return p.items.Reset(ctx, p.db, sku, to)
}

func (pgRows) noRow(err error) bool { return errors.Is(err, pgx.ErrNoRows) }
