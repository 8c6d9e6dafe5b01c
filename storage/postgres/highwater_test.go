package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// tableHighWater fails the test unless tb's HighWater of key is want.
func tableHighWater(t *testing.T, ctx context.Context, db postgres.DB, tb *postgres.Table, key any, want token.Token) {
	t.Helper()
	got, err := tb.HighWater(ctx, db, key)
	if err != nil || got != want {
		t.Fatalf("HighWater(%v) = %d, %v; want %d", key, got, err, want)
	}
}

// A row's high-water is its token column; a deleted row's, its tombstone;
// a row with a tombstone above its mark, the tombstone; a key with
// neither is no row.
func TestTableHighWater(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	ctx := ctxFor(t, time.Minute)
	items := newTable(t, postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id", Logger: discard})
	marks, err := postgres.NewTokens(postgres.TokensOptions{Check: token.NoCheck()})
	if err != nil {
		t.Fatal(err)
	}

	// Row only: never claimed, then claimed.
	tableHighWater(t, ctx, pool, items, 1, 0)
	if err := items.Update(ctx, pool, 1, 7, postgres.Set("stock", 9)); err != nil {
		t.Fatal(err)
	}
	tableHighWater(t, ctx, pool, items, 1, 7)
	tableHighWater(t, ctx, pool, items, int32(1), 7)

	// Tombstone only: the row deleted, its tombstone holds the deleting
	// token, whatever spelling of the key names it.
	if err := items.Upsert(ctx, pool, 4, 5); err != nil {
		t.Fatal(err)
	}
	if err := items.Delete(ctx, pool, 4, 9); err != nil {
		t.Fatal(err)
	}
	tableHighWater(t, ctx, pool, items, 4, 9)
	tableHighWater(t, ctx, pool, items, "04", 9)

	// Both: re-created, the row and the tombstone at the creating token;
	// the row claimed past the tombstone; the tombstone claimed past the
	// row (its name is a resource of the high-water table).
	if err := items.Upsert(ctx, pool, 4, 12); err != nil {
		t.Fatal(err)
	}
	tableHighWater(t, ctx, pool, items, 4, 12)
	if err := items.Read(ctx, pool, 4, 20, nil); err != nil {
		t.Fatal(err)
	}
	tableHighWater(t, ctx, pool, items, 4, 20)
	if err := marks.Fence(pool).Claim(ctx, "items/4", 30); err != nil {
		t.Fatal(err)
	}
	tableHighWater(t, ctx, pool, items, 4, 30)
	if err := items.Update(ctx, pool, 4, 25, postgres.Set("stock", 1)); err != nil {
		t.Fatalf("the row's own mark is 20: %v", err)
	}
	if _, err := items.Reset(ctx, pool, 4, 22); err != nil {
		t.Fatal(err)
	}
	tableHighWater(t, ctx, pool, items, 4, 22)

	// Neither.
	if got, err := items.HighWater(ctx, pool, 99); !errors.Is(err, postgres.ErrNoRow) || got != 0 {
		t.Fatalf("HighWater(99) = %d, %v; want ErrNoRow", got, err)
	}

	// A read takes no lock: it does not wait for a transaction that holds
	// both marks, and sees them as committed.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := items.Reset(ctx, tx, 4, 40); err != nil {
		t.Fatal(err)
	}
	tableHighWater(t, ctx, tx, items, 4, 40)
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tableHighWater(t, short, pool, items, 4, 22)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// A pruned tombstone is gone: the key's creation is compared with the
	// floor instead.
	if err := items.Delete(ctx, pool, 4, 50); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond)
	if _, err := postgres.Prune(ctx, pool, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got, err := items.HighWater(ctx, pool, 4); !errors.Is(err, postgres.ErrNoRow) {
		t.Fatalf("HighWater(4) after Prune = %d, %v; want ErrNoRow", got, err)
	}
	if f, err := postgres.NewFence(pool).HighWater(ctx, "items/4"); err != nil || f < 50 {
		t.Fatalf("the floor is %d, %v; want at least 50", f, err)
	}
}

// HighWater refuses what Reset refuses for its key and DB, and names a
// missing table with its fix.
func TestTableHighWaterBadInput(t *testing.T) {
	t.Parallel()
	pool, items := setup(t)
	ctx := ctxFor(t, time.Minute)
	var nilKey *int64
	for name, call := range map[string]func() (token.Token, error){
		"nil key":         func() (token.Token, error) { return items.HighWater(ctx, pool, nil) },
		"nil pointer key": func() (token.Token, error) { return items.HighWater(ctx, pool, nilKey) },
		"nil DB":          func() (token.Token, error) { return items.HighWater(ctx, nil, 1) },
	} {
		if got, err := call(); !errors.Is(err, postgres.ErrBadInput) || got != 0 {
			t.Errorf("%s: %d, %v; want ErrBadInput", name, got, err)
		}
	}
	missing := newTable(t, postgres.TableOptions{Name: pgx.Identifier{"missing"}, Key: "id"})
	var se *postgres.SchemaError
	if _, err := missing.HighWater(ctx, pool, 1); !errors.As(err, &se) || se.Fix == "" {
		t.Fatalf("a missing table: %v; want a SchemaError with its fix", err)
	}
}
