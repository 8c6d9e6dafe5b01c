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
type PostgresStore struct {
	db    DB
	items *postgres.Table
}

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
	return &PostgresStore{db: db, items: items}, nil
}

// Fencing implements [Store].
func (s *PostgresStore) Fencing() Fencing {
	return Fencing{Setup: "column-mode enforcer on the row (one statement per access; httpmw checks the token first)"}
}

// Get implements [Store].
func (s *PostgresStore) Get(ctx context.Context, sku string, t token.Token) (Item, error) {
	it := Item{SKU: sku}
	var err error
	if t.IsZero() {
		err = s.db.QueryRow(ctx, `SELECT stock FROM items WHERE sku = $1`, sku).Scan(&it.Stock)
	} else {
		err = s.items.Read(ctx, s.db, sku, t, []string{"stock"}, &it.Stock)
	}
	return it, storeErr(err)
}

// SetStock implements [Store].
func (s *PostgresStore) SetStock(ctx context.Context, sku string, stock int, t token.Token) (Item, error) {
	if t.IsZero() {
		tag, err := s.db.Exec(ctx, `UPDATE items SET stock = $2 WHERE sku = $1`, sku, stock)
		if err == nil && tag.RowsAffected() == 0 {
			err = ErrNotFound
		}
		return Item{SKU: sku, Stock: stock}, storeErr(err)
	}
	err := s.items.Update(ctx, s.db, sku, t, postgres.Set("stock", stock))
	return Item{SKU: sku, Stock: stock}, storeErr(err)
}

// Sell implements [Store]. Fenced, it is one statement on the row —
// UPDATE items SET stock = stock - 1 WHERE sku = $1 AND stock > 0, with
// the token check and the claim in it (storage/postgres's Add and Where) —
// so a sale needs no read first, and a stale holder, a missing item and a
// sold-out one are three different answers. Sold out, the row is claimed
// all the same: the holder saw the stock.
func (s *PostgresStore) Sell(ctx context.Context, sku string, t token.Token) error {
	if t.IsZero() {
		tag, err := s.db.Exec(ctx, `UPDATE items SET stock = stock - 1 WHERE sku = $1 AND stock > 0`, sku)
		if err == nil && tag.RowsAffected() == 0 { // sold out, or no such item
			err = s.db.QueryRow(ctx, `SELECT stock FROM items WHERE sku = $1`, sku).Scan(new(int))
			if err == nil {
				err = ErrSoldOut
			}
		}
		return storeErr(err)
	}
	err := s.items.Update(ctx, s.db, sku, t, postgres.Add("stock", -1), postgres.Where("stock > 0"))
	if errors.Is(err, postgres.ErrCondition) {
		return fmt.Errorf("%w (%w)", ErrSoldOut, err)
	}
	return storeErr(err)
}

// Put implements [Store]. It leaves the item's mark alone: a mark never goes
// down, or a stale holder could use the reset.
func (s *PostgresStore) Put(ctx context.Context, sku string, stock int) (Item, error) {
	_, err := s.db.Exec(ctx, `INSERT INTO items (sku, stock) VALUES ($1, $2)
		ON CONFLICT (sku) DO UPDATE SET stock = EXCLUDED.stock`, sku, stock)
	return Item{SKU: sku, Stock: stock}, storeErr(err)
}

// HighWater implements [Store]: the row's mark.
func (s *PostgresStore) HighWater(ctx context.Context, sku string) (token.Token, error) {
	var mark token.Token
	err := s.db.QueryRow(ctx, `SELECT fence_token FROM items WHERE sku = $1`, sku).Scan(&mark)
	return mark, storeErr(err)
}

// Ping implements [Store].
func (s *PostgresStore) Ping(ctx context.Context) error { return s.db.Ping(ctx) }

func storeErr(err error) error {
	if errors.Is(err, pgx.ErrNoRows) || errors.Is(err, postgres.ErrNoRow) {
		return ErrNotFound
	}
	return err
}

// ResetMark implements [Store]: the row's own mark (and its tombstone, if
// the row was deleted), reset and logged by storage/postgres.
func (s *PostgresStore) ResetMark(ctx context.Context, sku string, to token.Token) (token.Token, error) {
	prev, err := s.items.Reset(ctx, s.db, sku, to)
	return prev, storeErr(err)
}
