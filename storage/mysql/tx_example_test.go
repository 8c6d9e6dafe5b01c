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

// A fenced transaction: the holder's read-modify-write runs under the
// claim and commits; an older holder is refused before its fn runs.
func ExampleTx() {
	ctx := context.Background()
	db, err := sql.Open("mysql", mysqlserver.Example().DSN)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if err := mysql.Migrate(ctx, db); err != nil {
		panic(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE stock (sku INT PRIMARY KEY, n INT NOT NULL)`); err != nil {
		panic(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO stock VALUES (42, 10)`); err != nil {
		panic(err)
	}
	sell := func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT n FROM stock WHERE sku = 42`).Scan(&n); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE stock SET n = ? WHERE sku = 42`, n-1)
		return err
	}

	// Tokens from a locker are clock-floored: about the time in µs.
	older := token.Token(time.Now().UnixMicro())
	newer := older + 1
	fmt.Println(mysql.Tx(ctx, db, "sku:42", newer, sell))
	err = mysql.Tx(ctx, db, "sku:42", older, sell)
	fmt.Println("stale:", errors.Is(err, token.ErrStale))

	var n int
	if err := db.QueryRowContext(ctx, `SELECT n FROM stock WHERE sku = 42`).Scan(&n); err != nil {
		panic(err)
	}
	fmt.Println("stock:", n)
	// Output:
	// <nil>
	// stale: true
	// stock: 9
}
