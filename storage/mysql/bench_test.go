package mysql_test

// The canonical decrement, UPDATE … SET stock = stock - 1 WHERE … AND
// stock > 0, plain against column mode's one fenced statement (Add and
// Where) and against the fenced statement written by hand; and table
// mode, the same UPDATE in Tx, against it plain and in a transaction of
// its own. With 1 and 8 clients, on one hot row and on 8 rows, with the
// driver's server-side prepared statements (its default) and with
// interpolated arguments. Results and the command that reproduces them
// are in docs/benchmarks.md.

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/fenceguard/fenceguard/harness/modebench"
	"github.com/fenceguard/fenceguard/storage/mysql"
	"github.com/fenceguard/fenceguard/token"
)

type benchMode = modebench.Mode[token.Token]

const (
	plainDecrement = `UPDATE items SET stock = stock - 1 WHERE id = ? AND stock > 0`
	bareDecrement  = `UPDATE items SET fence_token = ?, stock = stock - 1 WHERE id = ? AND fence_token <= ? AND stock > 0`
)

// benchParams are the DSN settings the benchmarks run under.
var benchParams = []struct {
	name   string
	params []string
}{
	{"prepared", nil},
	{"interpolated", []string{"interpolateParams", "true"}},
}

// BenchmarkDecrement measures one unit sold: plain, in column mode
// (Table.Update with Add and Where), and the bare fenced UPDATE by hand,
// which cannot tell stale, missing and sold out apart. The stock never
// runs out, so every sale is accepted. Modes take turns in rounds
// (modebench); run it with -benchtime=Nx for N rounds.
func BenchmarkDecrement(b *testing.B) {
	for _, p := range benchParams {
		b.Run(p.name, func(b *testing.B) {
			db := benchDB(b, p.params...)
			items, err := mysql.NewTable(mysql.TableOptions{Name: []string{"items"}, Key: "id", Check: token.NoCheck()})
			if err != nil {
				b.Fatal(err)
			}
			modebench.Compare(b, []benchMode{
				{Name: "plain", Op: func(ctx context.Context, id int64, _ token.Token, _ int) error {
					return decrement(ctx, db, plainDecrement, id)
				}},
				{Name: "column", Op: func(ctx context.Context, id int64, tok token.Token, _ int) error {
					return items.Update(ctx, db, id, tok, mysql.Add("stock", -1), mysql.Where("stock > 0"))
				}},
				{Name: "bare", Op: func(ctx context.Context, id int64, tok token.Token, _ int) error {
					return decrement(ctx, db, bareDecrement, uint64(tok), id, uint64(tok))
				}},
			})
		})
	}
}

// BenchmarkTx measures table mode: the plain decrement autocommitted, in
// a transaction of its own (BEGIN, UPDATE, COMMIT), and in Tx (the claim
// of the row's resource in the high-water table first, with the hold
// bound's session settings). Rounds as in BenchmarkDecrement.
func BenchmarkTx(b *testing.B) {
	for _, p := range benchParams {
		b.Run(p.name, func(b *testing.B) {
			db := benchDB(b, p.params...)
			marks, err := mysql.NewTokens(mysql.TokensOptions{Check: token.NoCheck()})
			if err != nil {
				b.Fatal(err)
			}
			resources := make([]string, 9)
			for i := range resources {
				resources[i] = fmt.Sprint("sku:", i)
			}
			modebench.Compare(b, []benchMode{
				{Name: "plain", Op: func(ctx context.Context, id int64, _ token.Token, _ int) error {
					return decrement(ctx, db, plainDecrement, id)
				}},
				{Name: "plain-tx", Op: func(ctx context.Context, id int64, _ token.Token, _ int) error {
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						return err
					}
					if err := decrement(ctx, tx, plainDecrement, id); err != nil {
						_ = tx.Rollback()
						return err
					}
					return tx.Commit()
				}},
				{Name: "table", Op: func(ctx context.Context, id int64, tok token.Token, _ int) error {
					return marks.Tx(ctx, db, resources[id], tok, func(tx *sql.Tx) error {
						return decrement(ctx, tx, plainDecrement, id)
					})
				}},
			})
		})
	}
}

// decrement runs one of the decrements and checks it sold one unit.
func decrement(ctx context.Context, db mysql.DB, stmt string, args ...any) error {
	res, err := db.ExecContext(ctx, stmt, args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("%s: %d rows (%v)", stmt, n, err)
	}
	return nil
}

// benchDB returns a pool of up to 8 connections to a fresh database with
// the high-water table and items 1–8 (a stock that does not run out).
func benchDB(b *testing.B, params ...string) *sql.DB {
	db := newDB(b, params...)
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	ctx := context.Background()
	if err := mysql.Migrate(ctx, db); err != nil {
		b.Fatal(err)
	}
	exec(b, db, `CREATE TABLE items (id BIGINT PRIMARY KEY, stock INT NOT NULL,
 fence_token BIGINT UNSIGNED NOT NULL DEFAULT 0) ENGINE=InnoDB`)
	for id := 1; id <= 8; id++ {
		exec(b, db, fmt.Sprintf(`INSERT INTO items (id, stock) VALUES (%d, 2000000000)`, id))
	}
	var flush string
	if err := db.QueryRowContext(ctx, `SELECT @@innodb_flush_log_at_trx_commit`).Scan(&flush); err != nil {
		b.Fatal(err)
	}
	b.Logf("server: innodb_flush_log_at_trx_commit=%s", flush)
	return db
}
