package mysql_test

import (
	"context"
	"testing"

	"github.com/fenceguard/fenceguard/storage/mysql"
	"github.com/fenceguard/fenceguard/token"
)

// BenchmarkUpdate compares the fenced decrement, one statement that also
// checks and advances the token column, with the plain UPDATE it guards,
// on one row, one connection at a time, with the driver's prepared
// statements (default) and with interpolated arguments.
func BenchmarkUpdate(b *testing.B) {
	for _, params := range [][]string{nil, {"interpolateParams", "true"}} {
		name := "prepared"
		if params != nil {
			name = "interpolated"
		}
		b.Run(name, func(b *testing.B) {
			db := newDB(b, params...)
			exec(b, db, `CREATE TABLE items (id BIGINT PRIMARY KEY, stock INT NOT NULL, note VARCHAR(50),
 fence_token BIGINT UNSIGNED NOT NULL DEFAULT 0) ENGINE=InnoDB`,
				`INSERT INTO items (id, stock) VALUES (1, 1000000000)`)
			items, err := mysql.NewTable(mysql.TableOptions{Name: []string{"items"}, Key: "id", Check: token.NoCheck()})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.Run("plain", func(b *testing.B) {
				for b.Loop() {
					if _, err := db.ExecContext(ctx, `UPDATE items SET stock = stock - ? WHERE id = ? AND stock > 0`, 1, 1); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("fenced", func(b *testing.B) {
				tok := token.Token(1)
				for b.Loop() {
					if err := items.Update(ctx, db, 1, tok, mysql.Add("stock", -1), mysql.Where("stock > 0")); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("fence-claim", func(b *testing.B) {
				if err := mysql.Migrate(ctx, db); err != nil {
					b.Fatal(err)
				}
				marks, _ := mysql.NewTokens(mysql.TokensOptions{Check: token.NoCheck()})
				f := marks.Fence(db)
				for b.Loop() {
					if err := f.Claim(ctx, "sku:1", 1); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
