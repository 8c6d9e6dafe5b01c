package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/fenceguard/fenceguard/harness/mysqlserver"
	"github.com/fenceguard/fenceguard/storage/mysql"
	"github.com/fenceguard/fenceguard/token"
)

// exampleItems opens a fresh database with an items table guarded in
// column mode and the high-water table that keeps its tombstones.
func exampleItems(ctx context.Context) (*sql.DB, *mysql.Table) {
	db, err := sql.Open("mysql", mysqlserver.Example().DSN)
	if err != nil {
		panic(err)
	}
	if err := mysql.Migrate(ctx, db); err != nil {
		panic(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE items (id BIGINT PRIMARY KEY, stock INT NOT NULL DEFAULT 0,
	 fence_token BIGINT UNSIGNED NOT NULL DEFAULT 0)`); err != nil {
		panic(err)
	}
	items, err := mysql.NewTable(mysql.TableOptions{Name: []string{"items"}, Key: "id"})
	if err != nil {
		panic(err)
	}
	return db, items
}

// Upsert creates the row, Delete removes it and keeps its mark as a
// tombstone: an older holder cannot bring the row back, a newer one can.
func ExampleTable_Delete() {
	ctx := context.Background()
	db, items := exampleItems(ctx)
	defer db.Close()

	older := token.Token(time.Now().UnixMicro())
	newer := older + 1
	fmt.Println(items.Upsert(ctx, db, 42, older, mysql.Set("stock", 5))) // inserts
	fmt.Println(items.Delete(ctx, db, 42, newer))
	err := items.Upsert(ctx, db, 42, older, mysql.Set("stock", 5))
	fmt.Println(errors.Is(err, token.ErrStale)) // the tombstone refuses it
	hw, _ := items.HighWater(ctx, db, 42)
	fmt.Println(hw == newer)
	fmt.Println(items.Upsert(ctx, db, 42, newer, mysql.Set("stock", 1)))
	// Output:
	// <nil>
	// <nil>
	// true
	// true
	// <nil>
}

// Returning reads the row as the fenced Update left it: the stock after
// the sale, exactly, even with other sales under way.
func ExampleReturning() {
	ctx := context.Background()
	db, items := exampleItems(ctx)
	defer db.Close()

	tok := token.Token(time.Now().UnixMicro())
	if err := items.Upsert(ctx, db, 42, tok, mysql.Set("stock", 3)); err != nil {
		panic(err)
	}
	var left int
	err := items.Update(ctx, db, 42, tok, mysql.Add("stock", -1), mysql.Where("stock > 0"),
		mysql.Returning("stock", &left))
	fmt.Println(err, left)
	// Output:
	// <nil> 2
}

// Expr computes a column from the row in the fenced statement: saving
// the old price, then raising it, works; the other order is refused, as
// MySQL would let the second assignment read the first's new value.
func ExampleExpr() {
	ctx := context.Background()
	db, err := sql.Open("mysql", mysqlserver.Example().DSN)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	for _, q := range []string{
		`CREATE TABLE prices (sku VARCHAR(20) COLLATE utf8mb4_nopad_bin PRIMARY KEY, price DECIMAL(10,2), was DECIMAL(10,2),
		 fence_token BIGINT UNSIGNED NOT NULL DEFAULT 0)`,
		`INSERT INTO prices (sku, price) VALUES ('mug', 10)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			panic(err)
		}
	}
	prices, err := mysql.NewTable(mysql.TableOptions{Name: []string{"prices"}, Key: "sku"})
	if err != nil {
		panic(err)
	}
	tok := token.Token(time.Now().UnixMicro())
	var was, price string
	err = prices.Update(ctx, db, "mug", tok,
		mysql.Set("was", mysql.Expr("price")), // reads price before it changes
		mysql.Set("price", mysql.Expr("ROUND(price * ?, 2)", 1.1)),
		mysql.Returning("was", &was), mysql.Returning("price", &price))
	fmt.Println(err, was, price)
	err = prices.Update(ctx, db, "mug", tok,
		mysql.Set("price", mysql.Expr("price * ?", 2)),
		mysql.Set("was", mysql.Expr("price"))) // would read the new price
	fmt.Println(errors.Is(err, mysql.ErrBadInput))
	// Output:
	// <nil> 10.00 11.00
	// true
}
