package postgres_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// The everyday path: a holder takes the item's lock with guard.Do and
// sells one unit in one fenced statement; the next finds it sold out (the
// condition false, a typed error), and a holder that kept its token past
// its lease is refused. It runs as written against the database at
// DATABASE_URL (default postgres://postgres@localhost:5432/postgres), in a
// table example_items of its own; this package's tests point DATABASE_URL
// at a database of their own.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, cmp.Or(os.Getenv("DATABASE_URL"), "postgres://postgres@localhost:5432/postgres"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	// The guarded table, with one unit of sku 42 in stock.
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS example_items (sku bigint PRIMARY KEY, stock int NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO example_items VALUES (42, 1) ON CONFLICT (sku) DO UPDATE SET stock = 1`); err != nil {
		log.Fatal(err)
	}

	items, err := postgres.NewTable(postgres.TableOptions{
		Name: pgx.Identifier{"example_items"}, Key: "sku",
		LockKey: postgres.LockKeyPrefix("sku:"), // rows are locked as "sku:<sku>"
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := items.AddTokenColumn(ctx, pool); err != nil { // once, at deployment
		log.Fatal(err)
	}
	if err := postgres.Migrate(ctx, pool); err != nil { // the marks of deleted rows
		log.Fatal(err)
	}
	g, err := guard.New(memlock.New(), guard.Options{TTL: 10 * time.Second}) // any locker
	if err != nil {
		log.Fatal(err)
	}
	sell := func(ctx context.Context) error {
		// UPDATE example_items SET stock = stock - 1 WHERE sku = 42 AND stock > 0,
		// with the token check, in one statement; the token is the
		// context's, granted for "sku:42".
		return items.Update(ctx, pool, 42, 0, postgres.Add("stock", -1), postgres.Where("stock > 0"))
	}

	var paused context.Context // what a holder frozen inside Do still has
	err = g.Do(ctx, "sku:42", func(ctx context.Context, _ token.Token) error {
		paused = context.WithoutCancel(ctx)
		return nil // frozen before it could sell
	})
	fmt.Println("first holder:", err)
	err = g.Do(ctx, "sku:42", func(ctx context.Context, _ token.Token) error { return sell(ctx) })
	fmt.Println("second holder sells:", err)
	err = g.Do(ctx, "sku:42", func(ctx context.Context, _ token.Token) error { return sell(ctx) })
	fmt.Println("third holder, sold out:", errors.Is(err, postgres.ErrCondition))

	err = sell(paused) // the first holder wakes up
	fmt.Println("first holder, late, refused:", errors.Is(err, token.ErrStale))
	var stock int
	if err := pool.QueryRow(ctx, `SELECT stock FROM example_items WHERE sku = 42`).Scan(&stock); err != nil {
		log.Fatal(err)
	}
	fmt.Println("stock:", stock)
	// Output:
	// first holder: <nil>
	// second holder sells: <nil>
	// third holder, sold out: true
	// first holder, late, refused: true
	// stock: 0
}

// Table mode: any SQL in one transaction, under a claim of the lock's key
// held until commit. The empty resource and the zero token are the
// context's: the key guard.Do locked and its token. It runs against the
// database at DATABASE_URL, as Example does.
func ExampleTx_guarded() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, cmp.Or(os.Getenv("DATABASE_URL"), "postgres://postgres@localhost:5432/postgres"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	// The guarded table, with one unit of sku 42 in stock.
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS example_items (sku bigint PRIMARY KEY, stock int NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO example_items VALUES (42, 1) ON CONFLICT (sku) DO UPDATE SET stock = 1`); err != nil {
		log.Fatal(err)
	}
	if err := postgres.Migrate(ctx, pool); err != nil { // the fence_tokens table
		log.Fatal(err)
	}
	g, err := guard.New(memlock.New(), guard.Options{TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	restock := func(ctx context.Context) error {
		return postgres.Tx(ctx, pool, "", 0, func(tx pgx.Tx) error {
			var stock int
			if err := tx.QueryRow(ctx, `SELECT stock FROM example_items WHERE sku = 42`).Scan(&stock); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `UPDATE example_items SET stock = $1 WHERE sku = 42`, stock+10)
			return err
		})
	}

	var paused context.Context
	var first token.Token
	err = g.Do(ctx, "sku:42", func(ctx context.Context, t token.Token) error {
		paused, first = context.WithoutCancel(ctx), t
		return restock(ctx)
	})
	fmt.Println("first holder restocks:", err)
	err = g.Do(ctx, "sku:42", func(ctx context.Context, _ token.Token) error { return restock(ctx) })
	fmt.Println("second holder restocks:", err)
	// The first holder, resumed after its lease: its context says the
	// lease has ended, and Tx sends nothing.
	err = restock(paused)
	fmt.Println("first holder again, lease ended:", errors.Is(err, postgres.ErrHoldExpired))
	// Its token alone, without the lease (say, sent on to another
	// process): the claim refuses it.
	err = restock(token.NewContext(ctx, "sku:42", first))
	var stale *token.StaleError
	fmt.Println("first holder's token, refused:", errors.As(err, &stale), stale.Resource)
	var stock int
	if err := pool.QueryRow(ctx, `SELECT stock FROM example_items WHERE sku = 42`).Scan(&stock); err != nil {
		log.Fatal(err)
	}
	fmt.Println("stock:", stock)
	// Output:
	// first holder restocks: <nil>
	// second holder restocks: <nil>
	// first holder again, lease ended: true
	// first holder's token, refused: true sku:42
	// stock: 21
}

// A transfer between two accounts, each guarded by its own lock: guard's
// DoAll holds both keys and hands fn their tokens, which TxAll claims
// together before moving the money. A holder whose tokens are stale —
// here the first one, resumed after a newer holder of both accounts —
// is refused as a whole, and the error names the account. It runs
// against the database at DATABASE_URL, as Example does.
func ExampleTxAll_guarded() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, cmp.Or(os.Getenv("DATABASE_URL"), "postgres://postgres@localhost:5432/postgres"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS example_accounts (id text PRIMARY KEY, balance bigint NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO example_accounts VALUES ('alice', 100), ('bob', 100)
 ON CONFLICT (id) DO UPDATE SET balance = 100`); err != nil {
		log.Fatal(err)
	}
	if err := postgres.Migrate(ctx, pool); err != nil { // the fence_tokens table
		log.Fatal(err)
	}
	g, err := guard.New(memlock.New(), guard.Options{TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	transfer := func(ctx context.Context, tokens map[string]token.Token, from, to string, amount int64) error {
		return postgres.TxAll(ctx, pool, tokens, func(tx pgx.Tx) error {
			var balance int64
			err := tx.QueryRow(ctx, `UPDATE example_accounts SET balance = balance - $2 WHERE id = $1 RETURNING balance`, from, amount).Scan(&balance)
			if err != nil {
				return err
			}
			if balance < 0 {
				return errors.New("insufficient funds")
			}
			_, err = tx.Exec(ctx, `UPDATE example_accounts SET balance = balance + $2 WHERE id = $1`, to, amount)
			return err
		})
	}
	accounts := []string{"acct:bob", "acct:alice"} // in any order

	var first map[string]token.Token
	err = g.DoAll(ctx, accounts, func(ctx context.Context, tokens map[string]token.Token) error {
		first = tokens
		return transfer(ctx, tokens, "alice", "bob", 30)
	})
	fmt.Println("first holder moves 30:", err)
	err = g.DoAll(ctx, accounts, func(ctx context.Context, tokens map[string]token.Token) error {
		return transfer(ctx, tokens, "bob", "alice", 10)
	})
	fmt.Println("second holder moves 10 back:", err)
	// The first holder again, with its old tokens: both are below the
	// second holder's, and the first refused in order is alice's.
	err = transfer(ctx, first, "alice", "bob", 30)
	var stale *token.StaleError
	fmt.Println("first holder's tokens, refused:", errors.As(err, &stale), stale.Resource)
	for _, id := range []string{"alice", "bob"} {
		var balance int64
		if err := pool.QueryRow(ctx, `SELECT balance FROM example_accounts WHERE id = $1`, id).Scan(&balance); err != nil {
			log.Fatal(err)
		}
		fmt.Println(id, balance)
	}
	// Output:
	// first holder moves 30: <nil>
	// second holder moves 10 back: <nil>
	// first holder's tokens, refused: true acct:alice
	// alice 80
	// bob 120
}
