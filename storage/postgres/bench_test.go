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
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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

// benchSlice is how long each mode runs in one round.
const benchSlice = 100 * time.Millisecond

// lazyTokens sends the claim with fn's first statement.
var lazyTokens, _ = postgres.NewTokens(postgres.TokensOptions{ClaimWithFirstStatement: true})

type benchMode struct {
	name string
	op   func(ctx context.Context, id int64, tok token.Token, v int) error
}

// BenchmarkEnforcer measures the three modes on each workload. Commit
// latency with fsync on varies a lot on shared machines, so the modes
// take turns: each iteration is one round in which every mode runs for
// benchSlice (starting with a different mode each round), and the
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
		{"plain", func(ctx context.Context, id int64, _ token.Token, v int) error {
			_, err := pool.Exec(ctx, plainUpdate, id, v)
			return err
		}},
		// For comparison: the fenced UPDATE alone, which cannot tell a
		// stale token from a missing row without a second statement.
		{"bare", func(ctx context.Context, id int64, tok token.Token, v int) error {
			var ok bool
			return pool.QueryRow(ctx, bareUpdate, id, v, int64(tok)).Scan(&ok)
		}},
		{"column", func(ctx context.Context, id int64, tok token.Token, v int) error {
			return items.Update(ctx, pool, id, tok, postgres.Set("stock", v))
		}},
		{"table", func(ctx context.Context, id int64, tok token.Token, v int) error {
			return postgres.Tx(ctx, pool, resources[id], tok, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, plainUpdate, id, v)
				return err
			})
		}},
		{"table-lazy", func(ctx context.Context, id int64, tok token.Token, v int) error {
			return lazyTokens.Tx(ctx, pool, resources[id], tok, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, plainUpdate, id, v)
				return err
			})
		}},
		// For comparison: the same transaction written by hand, with a
		// round trip each for BEGIN, the claim, the UPDATE and COMMIT.
		{"naive", func(ctx context.Context, id int64, tok token.Token, v int) error {
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

	compare(b, modes)
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
	compare(b, []benchMode{
		{"plain", func(ctx context.Context, id int64, _ token.Token, v int) error {
			_, err := pool.Exec(ctx, plainUpdate, id, v)
			return err
		}},
		{"table", func(ctx context.Context, id int64, tok token.Token, v int) error {
			return postgres.Tx(ctx, pool, resources[id], tok, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, plainUpdate, id, v)
				return err
			})
		}},
		{"table-lazy", func(ctx context.Context, id int64, tok token.Token, v int) error {
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
	compare(b, []benchMode{
		{"table", func(ctx context.Context, id int64, tok token.Token, v int) error {
			return postgres.Tx(ctx, pool, fmt.Sprint("r0:", id), tok, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, plainUpdate, id, v)
				return err
			})
		}},
		{"all-2", all(0)},
		{"all-4", all(1)},
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
	compare(b, []benchMode{
		{"plain", func(ctx context.Context, id int64, _ token.Token, _ int) error {
			tag, err := pool.Exec(ctx, plainDecrement, id)
			if err == nil && tag.RowsAffected() != 1 {
				err = fmt.Errorf("plain decrement of item %d: %d rows", id, tag.RowsAffected())
			}
			return err
		}},
		{"column", func(ctx context.Context, id int64, tok token.Token, _ int) error {
			return items.Update(ctx, pool, id, tok, postgres.Add("stock", -1), postgres.Where("stock > 0"))
		}},
		// For comparison: the fenced decrement written by hand, which
		// cannot tell stale, missing and sold out apart.
		{"bare", func(ctx context.Context, id int64, tok token.Token, _ int) error {
			var ok bool
			return pool.QueryRow(ctx, bareDecrement, int64(tok), id).Scan(&ok)
		}},
	})
}

const (
	plainDecrement = `UPDATE items SET stock = stock - 1 WHERE id = $1 AND stock > 0`
	bareDecrement  = `UPDATE items SET fence_token = $1, stock = stock - 1 WHERE id = $2 AND fence_token <= $1 AND stock > 0 RETURNING true`
)

// compare runs modes in rounds on each workload and reports every mode's
// rate and its ratio to the first one's.
func compare(b *testing.B, modes []benchMode) {
	for _, w := range []struct{ clients, rows int }{{1, 1}, {1, 8}, {8, 1}, {8, 8}} {
		b.Run(fmt.Sprintf("clients=%d/rows=%d", w.clients, w.rows), func(b *testing.B) {
			for _, m := range modes { // warm up: connections, statement caches
				burst(b, m, w.clients, w.rows, 50*time.Millisecond)
			}
			ops := make([]int64, len(modes))
			took := make([]time.Duration, len(modes))
			b.ResetTimer()
			for r := range b.N {
				for k := range modes {
					i := (r + k) % len(modes)
					n, d := burst(b, modes[i], w.clients, w.rows, benchSlice)
					ops[i] += n
					took[i] += d
				}
			}
			rate := make([]float64, len(modes))
			for i, m := range modes {
				rate[i] = float64(ops[i]) / took[i].Seconds()
				b.ReportMetric(rate[i], m.name+"-ops/s")
			}
			for i, m := range modes[1:] {
				b.ReportMetric(rate[i+1]/rate[0], m.name+"/"+modes[0].name)
			}
		})
	}
}

// burst runs m from clients goroutines for d and returns the operations
// done and the time they took. 8 clients on 8 rows have one row each; one
// client goes round the rows. Every access of a burst carries the same
// token, taken from the clock so that it is above every earlier burst's:
// one holder per row, accessing it again and again, always accepted.
func burst(b *testing.B, m benchMode, clients, rows int, d time.Duration) (int64, time.Duration) {
	ctx := context.Background()
	tok := token.Token(time.Now().UnixMicro())
	var n atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for c := range clients {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				id := int64((c+clients*i)%rows + 1)
				if err := m.op(ctx, id, tok, i); err != nil {
					b.Errorf("%s: %v", m.name, err)
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return n.Load(), time.Since(start)
}

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
