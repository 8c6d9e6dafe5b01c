package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/fenceguard/fenceguard/harness/mysqlserver"
	"github.com/fenceguard/fenceguard/storage/mysql"
	"github.com/fenceguard/fenceguard/token"
)

// A Fence on the high-water table: a holder's token is accepted, again
// for its next access, and an older holder's is refused with the mark
// that refused it.
func ExampleFence() {
	ctx := context.Background()
	db, err := sql.Open("mysql", mysqlserver.Example().DSN)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if err := mysql.Migrate(ctx, db); err != nil {
		panic(err)
	}
	fence := mysql.NewFence(db)

	// Tokens from a locker are clock-floored: about the time in µs.
	older := token.Token(time.Now().UnixMicro())
	newer := older + 1
	fmt.Println(fence.Claim(ctx, "sku:42", newer))
	fmt.Println(fence.Claim(ctx, "sku:42", newer)) // the same holder again

	err = fence.Claim(ctx, "sku:42", older)
	var stale *token.StaleError
	if errors.As(err, &stale) {
		fmt.Println("refused; the mark is the newer token:", stale.Current == newer)
	}
	// Output:
	// <nil>
	// <nil>
	// refused; the mark is the newer token: true
}

// Column mode: the fenced form of
// UPDATE items SET stock = stock - 1 WHERE id = 42 AND stock > 0, one
// statement that checks and advances the row's token column.
func ExampleTable_Update() {
	ctx := context.Background()
	db, err := sql.Open("mysql", mysqlserver.Example().DSN)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	for _, q := range []string{
		`CREATE TABLE items (id BIGINT PRIMARY KEY, stock INT NOT NULL,
		 fence_token BIGINT UNSIGNED NOT NULL DEFAULT 0)`,
		`INSERT INTO items (id, stock) VALUES (42, 1)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			panic(err)
		}
	}
	items, err := mysql.NewTable(mysql.TableOptions{Name: []string{"items"}, Key: "id"})
	if err != nil {
		panic(err)
	}
	tok := token.Token(time.Now().UnixMicro())
	sell := func(t token.Token) error {
		return items.Update(ctx, db, 42, t, mysql.Add("stock", -1), mysql.Where("stock > 0"))
	}
	fmt.Println(sell(tok))                                // the last unit
	fmt.Println(errors.Is(sell(tok), mysql.ErrCondition)) // none left
	fmt.Println(errors.Is(sell(tok-1), token.ErrStale))   // an older holder
	fmt.Println(errors.Is(items.Update(ctx, db, 7, tok), mysql.ErrNoRow))
	// Output:
	// <nil>
	// true
	// true
	// true
}
