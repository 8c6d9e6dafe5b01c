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
