package postgres_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// A schema that does not fit fails with a *SchemaError whose message names
// what sets it up: postgres.Migrate (or the Tokens' Migrate) for a missing
// high-water table, Table.AddTokenColumn for a missing token column, and
// so on, whichever operation runs into it.
func TestSchemaErrorNamesTheFix(t *testing.T) {
	t.Parallel()
	pool := newPool(t) // not migrated
	ctx := ctxFor(t, 2*time.Minute)
	exec(t, pool,
		`CREATE TABLE items (id bigint PRIMARY KEY, stock int NOT NULL DEFAULT 0, fence_token bigint NOT NULL DEFAULT 0)`,
		`INSERT INTO items (id, stock) VALUES (1, 10)`,
		`CREATE TABLE nofence (id bigint PRIMARY KEY, stock int)`,
		`INSERT INTO nofence VALUES (1, 10)`,
		`CREATE TABLE textfence (id bigint PRIMARY KEY, stock int, fence_token text NOT NULL DEFAULT '0')`,
		`INSERT INTO textfence VALUES (1, 10, '5')`,
		`CREATE TABLE nokey (id bigint, stock int, fence_token bigint NOT NULL DEFAULT 0)`,
		`CREATE TABLE numkey (id numeric PRIMARY KEY, stock int, fence_token bigint NOT NULL DEFAULT 0)`,
		`INSERT INTO numkey VALUES (1, 10, 0)`)
	table := func(name, key string) *postgres.Table {
		return newTable(t, postgres.TableOptions{Name: pgx.Identifier{name}, Key: key, Logger: discard})
	}
	items, nofence, textfence, nokey := table("items", "id"), table("nofence", "id"), table("textfence", "id"), table("nokey", "id")
	missing, wrongKey, numkey := table("missing", "id"), table("items", "sku"), table("numkey", "id")
	marks, err := postgres.NewTokens(postgres.TokensOptions{Name: pgx.Identifier{"marks"}, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	none := func(pgx.Tx) error { return nil }
	set := postgres.Set("stock", 1)
	const migrate = "run postgres.Migrate"
	const addColumn = "run Table.AddTokenColumn"
	type fixCase struct {
		name string
		call func() error
		fix  string
	}
	check := func(cases []fixCase) {
		t.Helper()
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				err := c.call()
				var se *postgres.SchemaError
				if !errors.As(err, &se) {
					t.Fatalf("got %v, want a *SchemaError", err)
				}
				if !strings.Contains(se.Fix, c.fix) || !strings.Contains(err.Error(), "to fix: "+se.Fix) {
					t.Fatalf("got %q (Fix %q), want it to say %q", err, se.Fix, c.fix)
				}
			})
		}
	}
	check([]fixCase{
		{"Tx: no fence_tokens", func() error { return postgres.Tx(ctx, pool, "sku:1", 7, none) }, migrate},
		{"Fence.Claim: no fence_tokens", func() error { return postgres.NewFence(pool).Claim(ctx, "sku:1", 7) }, migrate},
		{"Fence.HighWater: no fence_tokens", func() error { _, err := postgres.NewFence(pool).HighWater(ctx, "sku:1"); return err }, migrate},
		{"Fence.Reset: no fence_tokens", func() error { _, err := postgres.NewFence(pool).Reset(ctx, "sku:1", 7); return err }, migrate},
		{"Prune: no fence_tokens", func() error { _, err := postgres.Prune(ctx, pool, time.Hour); return err }, migrate},
		{"Delete: no fence_tokens", func() error { return items.Delete(ctx, pool, 1, 7) }, migrate},
		{"Upsert of a new row: no fence_tokens", func() error { return items.Upsert(ctx, pool, 2, 7, set) }, migrate},
		{"Table.Reset: no fence_tokens", func() error { _, err := items.Reset(ctx, pool, 1, 7); return err }, migrate},
		{"Tokens.Tx: no such high-water table", func() error { return marks.Tx(ctx, pool, "sku:1", 7, none) }, "run Migrate on the Tokens named marks"},
		{"Read: no token column", func() error { var n int; return nofence.Read(ctx, pool, 1, 7, []string{"stock"}, &n) }, addColumn},
		{"Update: no token column", func() error { return nofence.Update(ctx, pool, 1, 7, set) }, addColumn},
		{"Update with Where: no token column", func() error {
			return nofence.Update(ctx, pool, 1, 7, postgres.Add("stock", -1), postgres.Where("stock > 0"))
		}, addColumn},
		{"Upsert: no token column", func() error { return nofence.Upsert(ctx, pool, 1, 7, set) }, addColumn},
		{"Update: token column not bigint", func() error { return textfence.Update(ctx, pool, 1, 7, set) }, "bigint not null"},
		{"AddTokenColumn: token column not bigint", func() error { return textfence.AddTokenColumn(ctx, pool) }, "bigint not null"},
		{"Update: no such table", func() error { return missing.Update(ctx, pool, 1, 7, set) }, "TableOptions.Name"},
		{"Delete: no such table", func() error { return missing.Delete(ctx, pool, 1, 7) }, "TableOptions.Name"},
		{"Update: no such key column", func() error { return wrongKey.Update(ctx, pool, 1, 7, set) }, "TableOptions.Key"},
		{"Verify: no such key column", func() error { return wrongKey.Verify(ctx, pool) }, "TableOptions.Key"},
		{"Delete: key type tombstones cannot name", func() error { return numkey.Delete(ctx, pool, 1, 7) }, "Read and Update work with any key type"},
	})
	// With the high-water table, what was hidden behind its absence.
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	check([]fixCase{
		{"Table.Reset: no token column", func() error { _, err := nofence.Reset(ctx, pool, 1, 7); return err }, addColumn},
		{"Upsert: key not unique", func() error { return nokey.Upsert(ctx, pool, 1, 7, set) }, "create a unique index"},
	})
	// The fixes work: after them, the same calls succeed.
	if err := nofence.AddTokenColumn(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := postgres.Tx(ctx, pool, "sku:1", 7, none); err != nil {
		t.Fatalf("Tx after Migrate: %v", err)
	}
	if err := items.Delete(ctx, pool, 1, 7); err != nil {
		t.Fatalf("Delete after Migrate: %v", err)
	}
	if err := nofence.Update(ctx, pool, 1, 7, set); err != nil {
		t.Fatalf("Update after AddTokenColumn: %v", err)
	}
}

// A zero token with the context's token of another lock is refused as
// missing, and the error points at what maps rows to locks
// (TableOptions.LockKey, the route's key, Tx's resource) — not at passing
// the token explicitly, which would skip the check that caught the
// mismatch. Nothing is written.
func TestLockKeyMismatchNamesTheFix(t *testing.T) {
	t.Parallel()
	pool, items := setup(t)
	ctx := ctxFor(t, time.Minute)
	accounts := newTable(t, postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id", LockKey: postgres.LockKeyPrefix("account:")})
	before := dump(t, pool, "items", "fence_tokens")
	for _, c := range []struct {
		name string
		call func() error
		want []string
	}{
		{"Table without LockKey", func() error {
			return items.Update(token.NewContext(ctx, "sku:1", 7), pool, 1, 0, postgres.Set("stock", 4))
		}, []string{`lock "sku:1"`, `"items/1"`, "TableOptions.LockKey is not set", `LockKeyPrefix("sku:")`}},
		{"Table with another LockKey", func() error {
			var n int
			return accounts.Read(token.NewContext(ctx, "id:1", 7), pool, 1, 0, []string{"stock"}, &n)
		}, []string{`lock "id:1"`, `"account:1"`, "TableOptions.LockKey maps", "the route's key"}},
		{"Tx on another resource", func() error {
			return postgres.Tx(token.NewContext(ctx, "sku:1", 7), pool, "sku:2", 0, func(pgx.Tx) error { return nil })
		}, []string{`lock "sku:1"`, `"sku:2"`, `or "" for the context's`}},
		{"Fence on another resource", func() error {
			return postgres.NewFence(pool).Claim(token.NewContext(ctx, "sku:1", 7), "sku:2", 0)
		}, []string{`lock "sku:1"`, `"sku:2"`, "the route's key"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			if !errors.Is(err, token.ErrMissing) {
				t.Fatalf("got %v, want ErrMissing", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "explicit") {
				t.Errorf("%q advises passing the token explicitly", err)
			}
			if after := dump(t, pool, "items", "fence_tokens"); after != before {
				t.Fatalf("wrote:\n%s\nwas:\n%s", after, before)
			}
		})
	}
}
