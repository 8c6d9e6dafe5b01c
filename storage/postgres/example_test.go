package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// The examples below need a server; they compile but do not run.
var (
	ctx  = context.Background()
	pool *pgxpool.Pool // pgxpool.New(ctx, "postgres://…")
	tok  token.Token   // from the lock: lease.Token()
)

// A service creates the high-water table at start-up; every instance may do
// so at once.
func ExampleMigrate() {
	if err := postgres.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
}

// Column mode: a read-modify-write under one token. The read claims the row,
// so once a newer holder has read it, this holder's write is refused.
func ExampleTable_Read() {
	items, err := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id"})
	if err != nil {
		log.Fatal(err)
	}
	var stock int
	if err := items.Read(ctx, pool, 42, tok, []string{"stock"}, &stock); err != nil {
		log.Fatal(err)
	}
	err = items.Update(ctx, pool, 42, tok, postgres.Set("stock", stock-1))
	var stale *token.StaleError
	switch {
	case errors.As(err, &stale):
		fmt.Println("lost the lock; the resource has seen token", stale.Current)
	case errors.Is(err, postgres.ErrNoRow):
		fmt.Println("no item 42")
	case err != nil:
		log.Fatal(err)
	}
}

func ExampleTable_Update() {
	items, _ := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{"inventory", "items"}, Key: "sku"})
	err := items.Update(ctx, pool, "A-42", tok, postgres.Set("stock", 7), postgres.Set("note", "recount"))
	if err != nil {
		log.Fatal(err)
	}
}

// Upsert creates the row if need be, but never re-creates one that a newer
// holder deleted.
func ExampleTable_Upsert() {
	items, _ := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id"})
	if err := items.Upsert(ctx, pool, 42, tok, postgres.Set("stock", 10)); err != nil {
		log.Fatal(err)
	}
}

func ExampleTable_Delete() {
	items, _ := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id"})
	if err := items.Delete(ctx, pool, 42, tok); err != nil && !errors.Is(err, postgres.ErrNoRow) {
		log.Fatal(err)
	}
}

// Put an existing table under column mode: add the token column (once; it
// is idempotent) and the high-water table for tombstones.
func ExampleTable_AddTokenColumn() {
	items, _ := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id"})
	if err := items.AddTokenColumn(ctx, pool); err != nil {
		log.Fatal(err)
	}
	if err := postgres.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
}

// Table mode: any SQL, under a claim of the resource held until commit.
func ExampleTx() {
	err := postgres.Tx(ctx, pool, "sku:42", tok, func(tx pgx.Tx) error {
		var stock int
		if err := tx.QueryRow(ctx, `SELECT stock FROM items WHERE sku = $1`, "A-42").Scan(&stock); err != nil {
			return err
		}
		if stock == 0 {
			return errors.New("sold out")
		}
		_, err := tx.Exec(ctx, `UPDATE items SET stock = $1 WHERE sku = $2`, stock-1, "A-42")
		return err
	})
	if errors.Is(err, token.ErrStale) {
		fmt.Println("lost the lock: nothing was written")
	}
}

// Inside guard.Do, resource and token come from the context.
func ExampleTx_fromContext() {
	ctx := token.NewContext(ctx, "sku:42", tok) // what guard.Do passes to fn
	err := postgres.Tx(ctx, pool, "", 0, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE items SET stock = stock - 1 WHERE sku = $1`, "A-42")
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
}

// The high-water table under another name, in its own schema.
func ExampleNewTokens() {
	marks, err := postgres.NewTokens(postgres.TokensOptions{Name: pgx.Identifier{"fencing", "marks"}})
	if err != nil {
		log.Fatal(err)
	}
	if err := marks.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
	items, _ := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id", Tokens: marks})
	_ = items
	err = marks.Tx(ctx, pool, "sku:42", tok, func(tx pgx.Tx) error { return nil })
	if err != nil {
		log.Fatal(err)
	}
}

// A Fence for the HTTP middleware, shared by every instance of the service.
func ExampleNewFence() {
	var fence token.Fence = postgres.NewFence(pool)
	if err := fence.Claim(ctx, "orders/17", tok); err != nil {
		log.Fatal(err)
	}
}

// Options are checked at construction, without a database.
func ExampleNewTable() {
	_, err := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{"items"}})
	fmt.Println(err)
	// Output: postgres: bad options: empty key column
}
