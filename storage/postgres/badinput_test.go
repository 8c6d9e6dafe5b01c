package postgres_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// Every call that cannot or must not succeed returns a typed error and
// writes nothing: the tables are compared before and after each, and fn of
// a refused Tx never runs.
func TestBadInput(t *testing.T) {
	t.Parallel()
	pool, items := setup(t)
	ctx := ctxFor(t, 2*time.Minute)
	exec(t, pool,
		`UPDATE items SET fence_token = 5 WHERE id = 1`,
		`CREATE TABLE nofence (id bigint PRIMARY KEY, stock int)`,
		`INSERT INTO nofence VALUES (1, 10)`,
		`CREATE TABLE textfence (id bigint PRIMARY KEY, stock int, fence_token text NOT NULL DEFAULT '0')`,
		`INSERT INTO textfence VALUES (1, 10, '5')`,
		`CREATE TABLE nokey (id bigint, stock int, fence_token bigint NOT NULL DEFAULT 0)`,
		`INSERT INTO nokey VALUES (1, 10, 5)`)
	if err := postgres.Tx(ctx, pool, "sku:1", 5, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	table := func(name string) *postgres.Table {
		return newTable(t, postgres.TableOptions{Name: pgx.Identifier{name}, Key: "id"})
	}
	nofence, textfence, nokey, missing := table("nofence"), table("textfence"), table("nokey"), table("missing")
	noMarks, err := postgres.NewTokens(postgres.TokensOptions{Name: pgx.Identifier{"no_such_marks"}})
	if err != nil {
		t.Fatal(err)
	}
	unmarked := newTable(t, postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id", Tokens: noMarks})
	// The same tables without the token check, for tokens the check would
	// refuse first.
	unchecked := newTable(t, postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id", Check: token.NoCheck(), Logger: discard})
	uncheckedMarks, err := postgres.NewTokens(postgres.TokensOptions{Check: token.NoCheck(), Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	lazy, err := postgres.NewTokens(postgres.TokensOptions{ClaimWithFirstStatement: true})
	if err != nil {
		t.Fatal(err)
	}
	resetter := newTable(t, postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id", Logger: discard})
	const forged = 1 << 62
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	var stock int
	// fn tries to write. On a bad argument it must not even run; when the
	// claim is refused it runs (the claim travels with its first
	// statement), but that statement must fail and write nothing.
	var fnRan bool
	var fnErr error
	fn := func(tx pgx.Tx) error {
		fnRan = true
		_, fnErr = tx.Exec(ctx, `UPDATE items SET stock = 0 WHERE id = 1`)
		return fnErr
	}
	set := postgres.Set("stock", 1)

	for _, c := range []struct {
		name string
		call func() error
		want error // tested with errors.Is
	}{
		// No token: zero, and none in the context.
		{"Read: zero token", func() error { return items.Read(ctx, pool, 1, 0, []string{"stock"}, &stock) }, token.ErrMissing},
		{"Update: zero token", func() error { return items.Update(ctx, pool, 1, 0, set) }, token.ErrMissing},
		{"Upsert: zero token", func() error { return items.Upsert(ctx, pool, 2, 0, set) }, token.ErrMissing},
		{"Delete: zero token", func() error { return items.Delete(ctx, pool, 1, 0) }, token.ErrMissing},
		{"Tx: zero token", func() error { return postgres.Tx(ctx, pool, "sku:1", 0, fn) }, token.ErrMissing},
		{"Fence: zero token", func() error { return postgres.NewFence(pool).Claim(ctx, "sku:1", 0) }, token.ErrMissing},
		// A token PostgreSQL's bigint cannot hold (the default check would
		// refuse it first, as forged).
		{"Update: token above bigint", func() error { return unchecked.Update(ctx, pool, 1, math.MaxInt64+1, set) }, token.ErrInvalid},
		{"Upsert: token above bigint", func() error { return unchecked.Upsert(ctx, pool, 1, math.MaxInt64+1, set) }, token.ErrRange},
		{"Tx: token above bigint", func() error { return uncheckedMarks.Tx(ctx, pool, "sku:1", math.MaxUint64, fn) }, token.ErrInvalid},
		{"Fence: token above bigint", func() error { return uncheckedMarks.Fence(pool).Claim(ctx, "sku:1", math.MaxUint64) }, token.ErrRange},
		// Forged: far above the clock, refused by the default check before
		// anything is sent.
		{"Read: forged", func() error { return items.Read(ctx, pool, 1, forged, []string{"stock"}, &stock) }, token.ErrForged},
		{"Update: forged", func() error { return items.Update(ctx, pool, 1, forged, set) }, token.ErrForged},
		{"Upsert: forged, existing row", func() error { return items.Upsert(ctx, pool, 1, forged, set) }, token.ErrForged},
		{"Upsert: forged, new row", func() error { return items.Upsert(ctx, pool, 2, forged, set) }, token.ErrForged},
		{"Delete: forged", func() error { return items.Delete(ctx, pool, 1, forged) }, token.ErrForged},
		{"Tx: forged", func() error { return postgres.Tx(ctx, pool, "sku:1", forged, fn) }, token.ErrForged},
		{"Tx lazy: forged", func() error { return lazy.Tx(ctx, pool, "sku:1", forged, fn) }, token.ErrForged},
		{"Fence: forged", func() error { return postgres.NewFence(pool).Claim(ctx, "sku:1", forged) }, token.ErrForged},
		{"Fence: forged, new resource", func() error { return postgres.NewFence(pool).Claim(ctx, "sku:9", forged) }, token.ErrForged},
		// Resets without a name, to zero, beyond bigint, of nothing.
		{"Table.Reset: nil key", func() error { _, err := resetter.Reset(ctx, pool, nil, 5); return err }, postgres.ErrBadInput},
		{"Table.Reset: to 0", func() error { _, err := resetter.Reset(ctx, pool, 1, 0); return err }, token.ErrMissing},
		{"Table.Reset: above bigint", func() error { _, err := resetter.Reset(ctx, pool, 1, math.MaxInt64+1); return err }, token.ErrRange},
		{"Table.Reset: nil DB", func() error { _, err := resetter.Reset(ctx, nil, 1, 5); return err }, postgres.ErrBadInput},
		{"Table.Reset: no row, no tombstone", func() error { _, err := resetter.Reset(ctx, pool, 2, 5); return err }, postgres.ErrNoRow},
		{"Table.Reset: no token column", func() error { _, err := nofence.Reset(ctx, pool, 1, 5); return err }, postgres.ErrSchema},
		{"Tokens.Reset: empty resource", func() error { _, err := uncheckedMarks.Reset(ctx, pool, "", 5); return err }, token.ErrNoResource},
		{"Tokens.Reset: to 0", func() error { _, err := uncheckedMarks.Reset(ctx, pool, "sku:1", 0); return err }, token.ErrMissing},
		{"Tokens.Reset: above bigint", func() error { _, err := uncheckedMarks.Reset(ctx, pool, "sku:1", math.MaxInt64+1); return err }, token.ErrRange},
		{"Tokens.Reset: nil DB", func() error { _, err := uncheckedMarks.Reset(ctx, nil, "sku:1", 5); return err }, postgres.ErrBadInput},
		{"Fence.Reset: empty resource", func() error { _, err := uncheckedMarks.Fence(pool).Reset(ctx, "", 5); return err }, token.ErrNoResource},
		{"Fence.Reset: no high-water table", func() error { _, err := noMarks.Fence(pool).Reset(ctx, "sku:1", 5); return err }, postgres.ErrSchema},
		// No resource key.
		{"Tx: empty resource", func() error { return postgres.Tx(ctx, pool, "", 7, fn) }, token.ErrNoResource},
		{"Fence: empty resource", func() error { return postgres.NewFence(pool).Claim(ctx, "", 7) }, token.ErrNoResource},
		// Stale: refused, nothing changes.
		{"Read: stale", func() error { return items.Read(ctx, pool, 1, 4, []string{"stock"}, &stock) }, token.ErrStale},
		{"Update: stale", func() error { return items.Update(ctx, pool, 1, 4, set) }, token.ErrStale},
		{"Upsert: stale", func() error { return items.Upsert(ctx, pool, 1, 4, set) }, token.ErrStale},
		{"Delete: stale", func() error { return items.Delete(ctx, pool, 1, 4) }, token.ErrStale},
		{"Tx: stale", func() error { return postgres.Tx(ctx, pool, "sku:1", 4, fn) }, token.ErrStale},
		{"Fence: stale", func() error { return postgres.NewFence(pool).Claim(ctx, "sku:1", 4) }, token.ErrStale},
		// No such row.
		{"Read: missing row", func() error { return items.Read(ctx, pool, 2, 7, []string{"stock"}, &stock) }, postgres.ErrNoRow},
		{"Update: missing row", func() error { return items.Update(ctx, pool, 2, 7, set) }, postgres.ErrNoRow},
		{"Delete: missing row", func() error { return items.Delete(ctx, pool, 2, 7) }, postgres.ErrNoRow},
		// A table without the token column.
		{"Read: no token column", func() error { return nofence.Read(ctx, pool, 1, 7, []string{"stock"}, &stock) }, postgres.ErrSchema},
		{"Update: no token column", func() error { return nofence.Update(ctx, pool, 1, 7, set) }, postgres.ErrSchema},
		{"Upsert: no token column", func() error { return nofence.Upsert(ctx, pool, 2, 7, set) }, postgres.ErrSchema},
		{"Delete: no token column", func() error { return nofence.Delete(ctx, pool, 1, 7) }, postgres.ErrSchema},
		// A token column of the wrong type, which must not compare as text.
		{"Update: text token column", func() error { return textfence.Update(ctx, pool, 1, 10, set) }, postgres.ErrSchema},
		// No table, no such column, no unique key, no high-water table.
		{"Update: missing table", func() error { return missing.Update(ctx, pool, 1, 7, set) }, postgres.ErrSchema},
		{"Update: unknown column", func() error { return items.Update(ctx, pool, 1, 7, postgres.Set("nope", 1)) }, postgres.ErrSchema},
		{"Read: unknown column", func() error { return items.Read(ctx, pool, 1, 7, []string{"nope"}, &stock) }, postgres.ErrSchema},
		{"Upsert: key not unique", func() error { return nokey.Upsert(ctx, pool, 2, 7, set) }, postgres.ErrSchema},
		{"Upsert: no high-water table", func() error { return unmarked.Upsert(ctx, pool, 2, 7, set) }, postgres.ErrSchema},
		{"Delete: no high-water table", func() error { return unmarked.Delete(ctx, pool, 1, 7) }, postgres.ErrSchema},
		{"Tx: no high-water table", func() error { return noMarks.Tx(ctx, pool, "sku:1", 7, fn) }, postgres.ErrSchema},
		{"Fence: no high-water table", func() error { return noMarks.Fence(pool).Claim(ctx, "sku:1", 7) }, postgres.ErrSchema},
		// A cancelled context.
		{"Read: cancelled", func() error { return items.Read(cancelled, pool, 1, 7, []string{"stock"}, &stock) }, context.Canceled},
		{"Update: cancelled", func() error { return items.Update(cancelled, pool, 1, 7, set) }, context.Canceled},
		{"Upsert: cancelled", func() error { return items.Upsert(cancelled, pool, 2, 7, set) }, context.Canceled},
		{"Delete: cancelled", func() error { return items.Delete(cancelled, pool, 1, 7) }, context.Canceled},
		{"Tx: cancelled", func() error { return postgres.Tx(cancelled, pool, "sku:1", 7, fn) }, context.Canceled},
		{"Fence: cancelled", func() error { return postgres.NewFence(pool).Claim(cancelled, "sku:1", 7) }, context.Canceled},
		{"Migrate: cancelled", func() error { return postgres.Migrate(cancelled, pool) }, context.Canceled},
		// Arguments no call could succeed with.
		{"Update: nil key", func() error { return items.Update(ctx, pool, nil, 7, set) }, postgres.ErrBadInput},
		{"Update: nil DB", func() error { return items.Update(ctx, nil, 1, 7, set) }, postgres.ErrBadInput},
		{"Update: nothing to set", func() error { return items.Update(ctx, pool, 1, 7) }, postgres.ErrBadInput},
		{"Update: sets the token column", func() error { return items.Update(ctx, pool, 1, 7, postgres.Set("fence_token", 99)) }, postgres.ErrBadInput},
		{"Upsert: sets the key column", func() error { return items.Upsert(ctx, pool, 1, 7, postgres.Set("id", 2)) }, postgres.ErrBadInput},
		{"Update: a column twice", func() error { return items.Update(ctx, pool, 1, 7, set, postgres.Set("stock", 2)) }, postgres.ErrBadInput},
		{"Update: empty column name", func() error { return items.Update(ctx, pool, 1, 7, postgres.Set("", 2)) }, postgres.ErrBadInput},
		{"Update: NUL in a column name", func() error { return items.Update(ctx, pool, 1, 7, postgres.Set("st\x00ock", 2)) }, postgres.ErrBadInput},
		{"Read: columns and destinations differ", func() error { return items.Read(ctx, pool, 1, 7, []string{"stock", "note"}, &stock) }, postgres.ErrBadInput},
		{"Tx: nil fn", func() error { return postgres.Tx(ctx, pool, "sku:1", 7, nil) }, postgres.ErrBadInput},
		{"Tx: nil DB", func() error { return postgres.Tx(ctx, nil, "sku:1", 7, fn) }, postgres.ErrBadInput},
		{"Fence: nil DB", func() error { return postgres.NewFence(nil).Claim(ctx, "sku:1", 7) }, postgres.ErrBadInput},
		{"Migrate: nil DB", func() error { return postgres.Migrate(ctx, nil) }, postgres.ErrBadInput},
		{"HighWater: empty resource", func() error { _, err := postgres.NewFence(pool).HighWater(ctx, ""); return err }, token.ErrNoResource},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := dump(t, pool, "items", "nofence", "textfence", "nokey", "fence_tokens")
			stock, fnRan, fnErr = -1, false, nil
			err := c.call()
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if errors.Is(c.want, postgres.ErrSchema) {
				var se *postgres.SchemaError
				var ce *postgres.ColumnError
				if !errors.As(err, &se) && !errors.As(err, &ce) {
					t.Fatalf("got %T, want a *SchemaError or a *ColumnError", err)
				}
			}
			if after := dump(t, pool, "items", "nofence", "textfence", "nokey", "fence_tokens"); after != before {
				t.Fatalf("wrote:\n%s\nwas:\n%s", after, before)
			}
			if stock != -1 {
				t.Fatalf("filled a destination with %d", stock)
			}
			if fnRan && !errors.Is(fnErr, c.want) {
				t.Fatalf("fn ran, and its statement returned %v", fnErr)
			}
			if fnRan && !errors.Is(c.want, token.ErrStale) && !errors.Is(c.want, postgres.ErrSchema) {
				t.Fatal("fn ran on bad input")
			}
			if s := pool.Stat(); s.AcquiredConns() != 0 {
				t.Fatalf("%d connections still acquired", s.AcquiredConns())
			}
		})
	}
}
