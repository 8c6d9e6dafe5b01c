package postgres_test

// A plain UPDATE against the same UPDATE fenced in column mode and in
// table mode, with 1 and 8 clients, on one hot row and on 8 rows. Two
// hand-written references: the bare fenced UPDATE (which cannot tell a
// stale token from a missing row) and a fenced transaction with a round
// trip per statement. And the canonical decrement, UPDATE … SET stock =
// stock - 1 WHERE … AND stock > 0, plain against column mode's one
// fenced statement (Add and Where). Results,
// the command that reproduces them and the server settings they need
// (fsync on) are in docs/benchmarks.md.

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/harness/modebench"
	"github.com/fenceguard/fenceguard/harness/pgserver"
	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

const (
	plainUpdate = `UPDATE items SET stock = $2 WHERE id = $1`
	bareUpdate  = `UPDATE items SET fence_token = $3, stock = $2 WHERE id = $1 AND fence_token <= $3 RETURNING true`
	naiveClaim  = `INSERT INTO fence_tokens AS m (resource, token, updated_at) VALUES ($1, $2, now())
 ON CONFLICT (resource) DO UPDATE SET token = excluded.token, updated_at = excluded.updated_at
 WHERE m.token <= excluded.token RETURNING true`
)

// lazyTokens sends the claim with fn's first statement.
var lazyTokens, _ = postgres.NewTokens(postgres.TokensOptions{ClaimWithFirstStatement: true})

type benchMode = modebench.Mode[token.Token]

// BenchmarkEnforcer measures the three modes on each workload. Commit
// latency with fsync on varies a lot on shared machines, so the modes
// take turns: each iteration is one round in which every mode runs for
// modebench.Slice (starting with a different mode each round), and the
// reported rates and ratios are over all rounds. Run it with
// -benchtime=Nx for N rounds.
func BenchmarkEnforcer(b *testing.B) {
	pool := benchPool(b)
	items := newTable(b, postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id"})
	resources := make([]string, 9)
	for i := range resources {
		resources[i] = fmt.Sprint("sku:", i)
	}
	modes := []benchMode{
		{Name: "plain", Op: func(ctx context.Context, id int64, _ token.Token, v int) error {
			_, err := pool.Exec(ctx, plainUpdate, id, v)
			return err
		}},
		// For comparison: the fenced UPDATE alone, which cannot tell a
		// stale token from a missing row without a second statement.
		{Name: "bare", Op: func(ctx context.Context, id int64, tok token.Token, v int) error {
			var ok bool
			return pool.QueryRow(ctx, bareUpdate, id, v, int64(tok)).Scan(&ok)
		}},
		{Name: "column", Op: func(ctx context.Context, id int64, tok token.Token, v int) error {
			return items.Update(ctx, pool, id, tok, postgres.Set("stock", v))
		}},
		{Name: "table", Op: func(ctx context.Context, id int64, tok token.Token, v int) error {
			return postgres.Tx(ctx, pool, resources[id], tok, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, plainUpdate, id, v)
				return err
			})
		}},
		{Name: "table-lazy", Op: func(ctx context.Context, id int64, tok token.Token, v int) error {
			return lazyTokens.Tx(ctx, pool, resources[id], tok, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, plainUpdate, id, v)
				return err
			})
		}},
		// For comparison: the same transaction written by hand, with a
		// round trip each for BEGIN, the claim, the UPDATE and COMMIT.
		{Name: "naive", Op: func(ctx context.Context, id int64, tok token.Token, v int) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				var ok bool
				err := tx.QueryRow(ctx, naiveClaim, resources[id], int64(tok)).Scan(&ok)
				if err != nil {
					return err
				}
				_, err = tx.Exec(ctx, plainUpdate, id, v)
				return err
			})
		}},
	}

	modebench.Compare(b, modes)
}

// BenchmarkTx measures table mode alone: the plain UPDATE against the same
// UPDATE in a fenced transaction, the claim sent before fn runs and sent
// with fn's first statement. Rounds as in BenchmarkEnforcer.
func BenchmarkTx(b *testing.B) {
	pool := benchPool(b)
	resources := make([]string, 9)
	for i := range resources {
		resources[i] = fmt.Sprint("sku:", i)
	}
	modebench.Compare(b, []benchMode{
		{Name: "plain", Op: func(ctx context.Context, id int64, _ token.Token, v int) error {
			_, err := pool.Exec(ctx, plainUpdate, id, v)
			return err
		}},
		{Name: "table", Op: func(ctx context.Context, id int64, tok token.Token, v int) error {
			return postgres.Tx(ctx, pool, resources[id], tok, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, plainUpdate, id, v)
				return err
			})
		}},
		{Name: "table-lazy", Op: func(ctx context.Context, id int64, tok token.Token, v int) error {
			return lazyTokens.Tx(ctx, pool, resources[id], tok, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, plainUpdate, id, v)
				return err
			})
		}},
	})
}

// BenchmarkTxAll measures the claim of several resources: the fenced
// transaction of BenchmarkTx on one resource against the same transaction
// claiming two and four (TxAll: one statement), each client on resources
// of its own. Rounds as in BenchmarkEnforcer.
func BenchmarkTxAll(b *testing.B) {
	pool := benchPool(b)
	sets := make([][]map[string]token.Token, 9)
	for id := range sets {
		for _, n := range []int{2, 4} {
			set := map[string]token.Token{}
			for j := range n {
				set[fmt.Sprintf("r%d:%d", j, id)] = 0
			}
			sets[id] = append(sets[id], set)
		}
	}
	all := func(n int) func(ctx context.Context, id int64, tok token.Token, v int) error {
		return func(ctx context.Context, id int64, tok token.Token, v int) error {
			claims := make(map[string]token.Token, len(sets[id][n]))
			for r := range sets[id][n] {
				claims[r] = tok
			}
			return postgres.TxAll(ctx, pool, claims, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, plainUpdate, id, v)
				return err
			})
		}
	}
	modebench.Compare(b, []benchMode{
		{Name: "table", Op: func(ctx context.Context, id int64, tok token.Token, v int) error {
			return postgres.Tx(ctx, pool, fmt.Sprint("r0:", id), tok, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, plainUpdate, id, v)
				return err
			})
		}},
		{Name: "all-2", Op: all(0)},
		{Name: "all-4", Op: all(1)},
	})
}

// BenchmarkDecrement measures the canonical read-modify-write, one unit
// sold: the plain UPDATE items SET stock = stock - 1 WHERE id = $1 AND
// stock > 0 against the same statement fenced in column mode,
// Table.Update with Add and Where — one statement, the token check in it.
// The stock never runs out, so every sale is accepted. Rounds as in
// BenchmarkEnforcer.
func BenchmarkDecrement(b *testing.B) {
	pool := benchPool(b)
	items := newTable(b, postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id"})
	modebench.Compare(b, []benchMode{
		{Name: "plain", Op: func(ctx context.Context, id int64, _ token.Token, _ int) error {
			tag, err := pool.Exec(ctx, plainDecrement, id)
			if err == nil && tag.RowsAffected() != 1 {
				err = fmt.Errorf("plain decrement of item %d: %d rows", id, tag.RowsAffected())
			}
			return err
		}},
		{Name: "column", Op: func(ctx context.Context, id int64, tok token.Token, _ int) error {
			return items.Update(ctx, pool, id, tok, postgres.Add("stock", -1), postgres.Where("stock > 0"))
		}},
		// For comparison: the fenced decrement written by hand, which
		// cannot tell stale, missing and sold out apart.
		{Name: "bare", Op: func(ctx context.Context, id int64, tok token.Token, _ int) error {
			var ok bool
			return pool.QueryRow(ctx, bareDecrement, int64(tok), id).Scan(&ok)
		}},
	})
}

const (
	plainDecrement = `UPDATE items SET stock = stock - 1 WHERE id = $1 AND stock > 0`
	bareDecrement  = `UPDATE items SET fence_token = $1, stock = stock - 1 WHERE id = $2 AND fence_token <= $1 AND stock > 0 RETURNING true`
)

// benchPool returns a pool of 8 connections to a fresh database with
// fence_tokens and items 1–8 (a stock that does not run out).
func benchPool(b *testing.B) *pgxpool.Pool {
	pg := pgserver.Shared(b)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pg.DSN)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns, cfg.MinConns = 8, 8
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	var fsync, syncCommit string
	if err := pool.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit')`).Scan(&fsync, &syncCommit); err != nil {
		b.Fatal(err)
	}
	b.Logf("server: fsync=%s synchronous_commit=%s", fsync, syncCommit)
	if err := postgres.Migrate(ctx, pool); err != nil {
		b.Fatal(err)
	}
	exec(b, pool,
		`CREATE TABLE items (id bigint PRIMARY KEY, stock int NOT NULL DEFAULT 0, fence_token bigint NOT NULL DEFAULT 0)`,
		`INSERT INTO items (id, stock) SELECT generate_series(1, 8), 2000000000`)
	return pool
}
