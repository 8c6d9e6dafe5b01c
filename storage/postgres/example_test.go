package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// The examples of this file need a server of yours; they compile but do
// not run (those of example_run_test.go run against the tests' own).
var (
	ctx  = context.Background()
	pool *pgxpool.Pool   // pgxpool.New(ctx, "postgres://…")
	tok  token.Token     // from the lock: lease.Token()
	seq  token.Sequencer // from the locker: e.g. etcdlock.NewSequencer(kv, prefix)
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

// The canonical decrement, fenced in one statement: UPDATE items SET
// stock = stock - 1 WHERE id = $1 AND stock > 0, with the token check.
// Each refusal is its own error.
func ExampleTable_Update_decrement() {
	items, err := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id"})
	if err != nil {
		log.Fatal(err)
	}
	err = items.Update(ctx, pool, 42, tok, postgres.Add("stock", -1), postgres.Where("stock > 0"))
	var stale *token.StaleError
	switch {
	case err == nil:
		fmt.Println("sold one")
	case errors.Is(err, postgres.ErrCondition):
		fmt.Println("sold out") // the token was accepted: this holder saw the stock at 0
	case errors.As(err, &stale):
		fmt.Println("lost the lock; the resource has seen token", stale.Current)
	case errors.Is(err, postgres.ErrNoRow):
		fmt.Println("no item 42")
	default:
		log.Fatal(err)
	}
}

// Expressions and conditions with arguments: the arguments are query
// parameters; the fragments are the program's own SQL.
func ExampleExpr() {
	items, _ := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id"})
	qty, price := 3, 1250
	err := items.Update(ctx, pool, 42, tok,
		postgres.Add("stock", -qty),
		postgres.Set("revenue", postgres.Expr("revenue + $1 * $2", qty, price)),
		postgres.Where("stock >= $1", qty))
	if err != nil {
		log.Fatal(err)
	}
}

// A debit that returns the new balance from the statement that makes it:
// no second statement, no second claim.
func ExampleReturning() {
	accounts, _ := postgres.NewTable(postgres.TableOptions{
		Name: pgx.Identifier{"accounts"}, Key: "id",
		LockKey: postgres.LockKeyPrefix("account:"), // rows are locked as "account:<id>"
	})
	amount := int64(250)
	var balance int64
	err := accounts.Update(ctx, pool, 7, tok,
		postgres.Add("balance", -amount),
		postgres.Where("balance >= $1", amount),
		postgres.Returning("balance", &balance))
	switch {
	case err == nil:
		fmt.Println("debited; balance now", balance)
	case errors.Is(err, postgres.ErrCondition):
		fmt.Println("insufficient funds") // balance is untouched on every refusal
	default:
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

// A transfer between two accounts, each guarded by a lock of its own: one
// transaction claims both (in one statement, in sorted order, so that a
// transfer the other way cannot deadlock with it) and moves the money. A
// stale token for either account refuses the whole transfer.
func ExampleTxAll() {
	from, to := "acct:alice", "acct:bob"
	var fromTok, toTok token.Token // from the two locks: lease.Token()
	err := postgres.TxAll(ctx, pool, map[string]token.Token{from: fromTok, to: toTok}, func(tx pgx.Tx) error {
		var balance int64
		if err := tx.QueryRow(ctx, `UPDATE accounts SET balance = balance - $2 WHERE id = $1 RETURNING balance`, "alice", 30).Scan(&balance); err != nil {
			return err
		}
		if balance < 0 {
			return errors.New("insufficient funds") // rolled back
		}
		_, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance + $2 WHERE id = $1`, "bob", 30)
		return err
	})
	var stale *token.StaleError
	if errors.As(err, &stale) {
		fmt.Println("lost the lock of", stale.Resource, "- nothing was written")
	}
}

// Inside guard.DoAll, the context carries every key's token: zero tokens
// are taken from it, each for its own resource.
func ExampleTxAll_fromContext() {
	ctx := token.NewContext(token.NewContext(ctx, "acct:alice", tok), "acct:bob", tok+1) // what guard.DoAll passes to fn
	err := postgres.TxAll(ctx, pool, map[string]token.Token{"acct:alice": 0, "acct:bob": 0}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance + 1 WHERE id = ANY($1)`, []string{"alice", "bob"})
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
	// Output: postgres: empty key column
}

// Guard against forged tokens with the lock service's word as well as the
// clock: the cheap clock bound first, then the sequencer check, which asks
// the lock which token its current holder has. Rows of the items table
// are guarded by the locks "sku:<id>".
func ExampleTableOptions_check() {
	check := token.All(token.DefaultCheck(), token.SequencerCheck(seq, token.SequencerOptions{
		LockKey: func(resource string) string { return "sku:" + strings.TrimPrefix(resource, "items/") },
	}))
	items, err := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id", Check: check})
	if err != nil {
		log.Fatal(err)
	}
	err = items.Update(ctx, pool, 42, tok, postgres.Set("stock", 0))
	if errors.Is(err, token.ErrForged) {
		fmt.Println("refused: the lock never granted", tok)
	}
}

// Table mode with the sequencer check, and the hold bound at the lease's
// TTL, so that a holder frozen inside its transaction frees the resource
// when its lease would have ended.
func ExampleTokensOptions() {
	marks, err := postgres.NewTokens(postgres.TokensOptions{
		Check:       token.All(token.DefaultCheck(), token.SequencerCheck(seq, token.SequencerOptions{})),
		HoldTimeout: 10 * time.Second, // the lease's TTL
	})
	if err != nil {
		log.Fatal(err)
	}
	err = marks.Tx(ctx, pool, "sku:42", tok, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE items SET stock = stock - 1 WHERE sku = $1`, "A-42")
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
}

// An operator sets a row poisoned by a forged token back to the lock's
// current token, by name; the reset is logged at Warn level.
func ExampleTable_Reset() {
	items, _ := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id"})
	current, err := seq.Current(ctx, "sku:42")
	if err != nil {
		log.Fatal(err)
	}
	prev, err := items.Reset(ctx, pool, 42, current)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("items/42: mark %d reset to %d\n", prev, current)
}

// The same for a resource of the high-water table, through the Fence the
// HTTP middleware uses.
func ExampleFence_Reset() {
	fence := postgres.NewFence(pool)
	current, err := seq.Current(ctx, "orders/17")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := fence.Reset(ctx, "orders/17", current); err != nil {
		log.Fatal(err)
	}
}

// At start-up, fail early if a table's key cannot carry tombstones.
func ExampleTable_Verify() {
	users, _ := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{"users"}, Key: "email"})
	err := users.Verify(ctx, pool)
	var kte *postgres.KeyTypeError
	if errors.As(err, &kte) {
		log.Fatalf("users cannot be deleted under fencing: %v", kte) // e.g. a citext key
	}
	if err != nil {
		log.Fatal(err)
	}
}
