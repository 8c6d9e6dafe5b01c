package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// highWater returns resource's mark in fence_tokens, 0 if none.
func highWater(t testing.TB, pool *pgxpool.Pool, resource string) token.Token {
	t.Helper()
	tok, err := postgres.NewFence(pool).HighWater(context.Background(), resource)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// sell is a read-modify-write of item 1 inside a transaction.
func sell(ctx context.Context, tx pgx.Tx) error {
	var stock int
	if err := tx.QueryRow(ctx, `SELECT stock FROM items WHERE id = 1`).Scan(&stock); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `UPDATE items SET stock = $1 WHERE id = 1`, stock-1)
	return err
}

func TestTxCommitsAndRefuses(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	ctx := ctxFor(t, time.Minute)
	if err := postgres.Tx(ctx, pool, "sku:1", 5, func(tx pgx.Tx) error { return sell(ctx, tx) }); err != nil {
		t.Fatal(err)
	}
	if err := postgres.Tx(ctx, pool, "sku:1", 5, func(tx pgx.Tx) error { return sell(ctx, tx) }); err != nil {
		t.Fatalf("the same token again: %v", err)
	}
	ran := false
	err := postgres.Tx(ctx, pool, "sku:1", 4, func(tx pgx.Tx) error {
		ran = true
		return sell(ctx, tx)
	})
	stale(t, err, 4, 5)
	if ran {
		t.Fatal("fn ran although the claim was refused: claim, then act")
	}
	var se *token.StaleError
	if errors.As(err, &se); se.Resource != "sku:1" {
		t.Fatalf("StaleError.Resource = %q", se.Resource)
	}
	if stock, _ := row(t, pool, 1); stock != 8 {
		t.Fatalf("stock %d, want 8", stock)
	}
	if hw := highWater(t, pool, "sku:1"); hw != 5 {
		t.Fatalf("high-water %d, want 5", hw)
	}
	// Resources are independent.
	if err := postgres.Tx(ctx, pool, "sku:2", 1, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

// The race of docs/design.md in table mode: A's read and A's write are two
// fenced transactions, and B's claim in between refuses A's write.
func TestTxReadModifyWriteRace(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	ctx := ctxFor(t, time.Minute)
	exec(t, pool, `UPDATE items SET stock = 1 WHERE id = 1`)
	read := func(tok token.Token) (stock int, err error) {
		err = postgres.Tx(ctx, pool, "sku:1", tok, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT stock FROM items WHERE id = 1`).Scan(&stock)
		})
		return stock, err
	}
	write := func(tok token.Token, stock int) error {
		return postgres.Tx(ctx, pool, "sku:1", tok, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE items SET stock = $1 WHERE id = 1`, stock)
			return err
		})
	}
	a, err := read(5)
	if err != nil {
		t.Fatal(err)
	}
	b, err := read(6) // A is paused
	if err != nil {
		t.Fatal(err)
	}
	stale(t, write(5, a-1), 5, 6)
	if err := write(6, b-1); err != nil {
		t.Fatal(err)
	}
	stale(t, write(5, a-1), 5, 6)
	if stock, _ := row(t, pool, 1); stock != 0 {
		t.Fatalf("stock %d, want 0", stock)
	}
}

// A holder paused inside its transaction keeps the resource: a newer
// holder's transaction waits for it and then sees its write.
func TestTxSerializesHolders(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	ctx := ctxFor(t, time.Minute)
	inside, resume := make(chan struct{}), make(chan struct{})
	errA := make(chan error, 1)
	go func() {
		errA <- postgres.Tx(ctx, pool, "sku:1", 5, func(tx pgx.Tx) error {
			var stock int
			if err := tx.QueryRow(ctx, `SELECT stock FROM items WHERE id = 1`).Scan(&stock); err != nil {
				return err
			}
			close(inside) // A has read, under its claim, and pauses
			<-resume
			_, err := tx.Exec(ctx, `UPDATE items SET stock = $1 WHERE id = 1`, stock-1)
			return err
		})
	}()
	<-inside
	errB := make(chan error, 1)
	go func() {
		errB <- postgres.Tx(ctx, pool, "sku:1", 6, func(tx pgx.Tx) error { return sell(ctx, tx) })
	}()
	waitBlocked(t, pool, 1)
	close(resume)
	if err := <-errA; err != nil {
		t.Fatal(err)
	}
	if err := <-errB; err != nil {
		t.Fatal(err)
	}
	if stock, _ := row(t, pool, 1); stock != 8 {
		t.Fatalf("stock %d, want 8: a sale was lost", stock)
	}
}

// A refusal decided on a mark committed after the claim's snapshot still
// reports that mark.
func TestTxRefusedAfterSnapshot(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	ctx := ctxFor(t, time.Minute)
	if err := postgres.NewFence(pool).Claim(ctx, "sku:1", 3); err != nil {
		t.Fatal(err)
	}
	other, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(context.Background())
	if _, err := other.Exec(ctx, `UPDATE fence_tokens SET token = 7 WHERE resource = 'sku:1'`); err != nil {
		t.Fatal(err)
	}
	errTx, errFence := make(chan error, 1), make(chan error, 1)
	go func() {
		errTx <- postgres.Tx(ctx, pool, "sku:1", 5, func(tx pgx.Tx) error { return sell(ctx, tx) })
	}()
	go func() { errFence <- postgres.NewFence(pool).Claim(ctx, "sku:1", 6) }()
	waitBlocked(t, pool, 2)
	if err := other.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	stale(t, <-errTx, 5, 7)
	stale(t, <-errFence, 6, 7)
}

// 16 holders with interleaved random tokens run read-modify-write
// transactions on one resource; fn logs each write in the same
// transaction. The checks are those of column mode.
func TestTxConcurrentTokens(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	exec(t, pool, `CREATE TABLE hist (seq bigserial PRIMARY KEY, token bigint NOT NULL, note text)`)
	hist := runWriters(t, func(ctx context.Context, tok token.Token, note string, rmw bool) error {
		return postgres.Tx(ctx, pool, "sku:1", tok, func(tx pgx.Tx) error {
			if rmw {
				if err := sell(ctx, tx); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `UPDATE items SET stock = stock + 2 WHERE id = 1`); err != nil {
					return err
				}
			}
			if _, err := tx.Exec(ctx, `UPDATE items SET note = $1 WHERE id = 1`, note); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO hist (token, note) VALUES ($1, $2)`, int64(tok), note)
			return err
		})
	}, pool, `SELECT token, note FROM hist ORDER BY seq`)
	checkFinal(t, pool, hist)
	if hw, last := highWater(t, pool, "sku:1"), hist[len(hist)-1].tok; hw != last {
		t.Fatalf("high-water %d, want the last accepted %d", hw, last)
	}
}

// fn failing, panicking or outliving its context leaves nothing: neither
// its writes nor the claim.
func TestTxRollsBack(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	ctx := ctxFor(t, time.Minute)
	if err := postgres.Tx(ctx, pool, "sku:1", 3, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	before := dump(t, pool, "items", "fence_tokens")
	check := func(what string) {
		t.Helper()
		if after := dump(t, pool, "items", "fence_tokens"); after != before {
			t.Fatalf("%s left writes behind:\n%s\nwas\n%s", what, after, before)
		}
		if s := pool.Stat(); s.AcquiredConns() != 0 {
			t.Fatalf("%s: %d connections still acquired", what, s.AcquiredConns())
		}
	}

	boom := errors.New("boom")
	err := postgres.Tx(ctx, pool, "sku:1", 4, func(tx pgx.Tx) error {
		if err := sell(ctx, tx); err != nil {
			return err
		}
		return boom
	})
	if err != boom { // returned as is, not wrapped
		t.Fatalf("Tx = %v, want fn's error as is", err)
	}
	check("an error")

	func() {
		defer func() {
			if p := recover(); p != "oops" {
				t.Fatalf("recovered %v, want fn's panic", p)
			}
		}()
		_ = postgres.Tx(ctx, pool, "sku:1", 4, func(tx pgx.Tx) error {
			if err := sell(ctx, tx); err != nil {
				return err
			}
			panic("oops")
		})
		t.Fatal("Tx returned from a panicking fn")
	}()
	check("a panic")

	cctx, cancel := context.WithCancel(ctx)
	err = postgres.Tx(cctx, pool, "sku:1", 4, func(tx pgx.Tx) error {
		if err := sell(cctx, tx); err != nil {
			return err
		}
		cancel() // fn does not notice
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Tx with a context cancelled in fn = %v, want context.Canceled", err)
	}
	check("a cancelled context")

	cctx, cancel = context.WithCancel(ctx)
	err = postgres.Tx(cctx, pool, "sku:1", 4, func(tx pgx.Tx) error {
		if err := sell(cctx, tx); err != nil {
			return err
		}
		cancel()
		return sell(cctx, tx) // fails: the context is done
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Tx with a context cancelled under a statement = %v, want context.Canceled", err)
	}
	check("a statement cancelled")

	err = postgres.Tx(ctx, pool, "sku:1", 4, func(tx pgx.Tx) error {
		_, _ = tx.Exec(ctx, `SELECT 1/0`) // error swallowed: the transaction is aborted
		return nil
	})
	if !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Fatalf("Tx after a swallowed error = %v, want ErrTxCommitRollback", err)
	}
	check("a swallowed error")
}

// A backend killed in the middle of fn leaves neither fn's first write nor
// the claim behind.
func TestTxKilledBackend(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	ctx := ctxFor(t, time.Minute)
	before := dump(t, pool, "items", "fence_tokens")
	err := postgres.Tx(ctx, pool, "sku:1", 9, func(tx pgx.Tx) error {
		if err := sell(ctx, tx); err != nil {
			return err
		}
		var pid int32
		if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			return err
		}
		if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
			t.Errorf("terminate: %v", err)
		}
		return sell(ctx, tx)
	})
	if err == nil {
		t.Fatal("Tx on a killed backend returned nil")
	}
	if after := dump(t, pool, "items", "fence_tokens"); after != before {
		t.Fatalf("a killed transaction left a partial write:\n%s\nwas\n%s", after, before)
	}
	// The pool carries on.
	if err := postgres.Tx(ctx, pool, "sku:1", 9, func(tx pgx.Tx) error { return sell(ctx, tx) }); err != nil {
		t.Fatal(err)
	}
}

// Tx on one connection, and inside the caller's transaction (a savepoint).
func TestTxOnConnAndTx(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	ctx := ctxFor(t, time.Minute)
	c, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	conn := c.Conn()
	if err := postgres.Tx(ctx, conn, "sku:1", 2, func(tx pgx.Tx) error { return sell(ctx, tx) }); err != nil {
		t.Fatal(err)
	}
	if err := postgres.Tx(ctx, c, "sku:1", 2, func(tx pgx.Tx) error { return nil }); err != nil { // *pgxpool.Conn
		t.Fatal(err)
	}

	outer, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, db := range []postgres.DB{conn, c} {
		if err := postgres.Tx(ctx, db, "sku:1", 3, func(pgx.Tx) error { return nil }); !errors.Is(err, postgres.ErrBadInput) {
			t.Fatalf("Tx on a %T inside a transaction = %v, want ErrBadInput", db, err)
		}
	}
	if err := postgres.Tx(ctx, outer, "sku:1", 3, func(tx pgx.Tx) error { return sell(ctx, tx) }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := postgres.Tx(ctx, outer, "sku:1", 4, func(tx pgx.Tx) error {
		_ = sell(ctx, tx)
		return boom
	}); err != boom {
		t.Fatalf("nested Tx = %v, want boom", err)
	}
	stale(t, postgres.Tx(ctx, outer, "sku:1", 1, func(tx pgx.Tx) error { return sell(ctx, tx) }), 1, 3)
	// The savepoints undid the failed one's sale; the outer transaction
	// still works and decides.
	var stock int
	if err := outer.QueryRow(ctx, `SELECT stock FROM items WHERE id = 1`).Scan(&stock); err != nil || stock != 8 {
		t.Fatalf("inside: stock %d, %v; want 8", stock, err)
	}
	if err := outer.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if stock, _ := row(t, pool, 1); stock != 9 {
		t.Fatalf("after the outer rollback: stock %d, want 9", stock)
	}
	if hw := highWater(t, pool, "sku:1"); hw != 2 {
		t.Fatalf("after the outer rollback: high-water %d, want 2", hw)
	}
}

// Resource and token come from the context when not passed, the token only
// for the context's own resource.
func TestTxFromContext(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	ctx := token.NewContext(ctxFor(t, time.Minute), "sku:1", 6)
	if err := postgres.Tx(ctx, pool, "", 0, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := postgres.Tx(ctx, pool, "sku:1", 0, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if hw := highWater(t, pool, "sku:1"); hw != 6 {
		t.Fatalf("high-water %d, want the context's 6", hw)
	}
	if err := postgres.Tx(ctx, pool, "sku:2", 0, func(pgx.Tx) error { return nil }); !errors.Is(err, token.ErrMissing) {
		t.Fatalf("Tx for another resource without a token = %v, want ErrMissing", err)
	}
	if err := postgres.Tx(ctx, pool, "sku:2", 1, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

// Fenced transactions on many resources from many goroutines, to give the
// race detector and the pool's bookkeeping something to chew on.
func TestTxManyResources(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	ctx := ctxFor(t, time.Minute)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				res := []string{"a", "b", "c"}[(g+i)%3]
				err := postgres.Tx(ctx, pool, res, token.Token(100+i), func(tx pgx.Tx) error {
					_, err := tx.Exec(ctx, `UPDATE items SET stock = stock + 1 WHERE id = 1`)
					return err
				})
				if err != nil && !errors.Is(err, token.ErrStale) {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if s := pool.Stat(); s.AcquiredConns() != 0 {
		t.Fatalf("%d connections still acquired", s.AcquiredConns())
	}
}

// What the pgx.Tx given to fn does when BEGIN and the claim travel with
// fn's first statement (ClaimWithFirstStatement).
func TestTxPipeline(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	lazy, err := postgres.NewTokens(postgres.TokensOptions{ClaimWithFirstStatement: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, time.Minute)
	exec(t, pool, `CREATE SEQUENCE probe`)
	if err := postgres.NewFence(pool).Claim(ctx, "sku:1", 5); err != nil {
		t.Fatal(err)
	}
	probe := func() (last int64, called bool) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT last_value, is_called FROM probe`).Scan(&last, &called); err != nil {
			t.Fatal(err)
		}
		return last, called
	}
	idle := func() {
		t.Helper()
		if s := pool.Stat(); s.AcquiredConns() != 0 {
			t.Fatalf("%d connections still acquired", s.AcquiredConns())
		}
	}

	t.Run("stale: the server skips the statement", func(t *testing.T) {
		var errs []error
		err := lazy.Tx(ctx, pool, "sku:1", 4, func(tx pgx.Tx) error {
			var n int64
			errs = append(errs, tx.QueryRow(ctx, `SELECT nextval('probe')`).Scan(&n))
			_, err := tx.Exec(ctx, `SELECT nextval('probe')`)
			errs = append(errs, err)
			_, err = tx.Conn().Exec(ctx, `SELECT nextval('probe')`) // around the Tx
			errs = append(errs, err)
			return errs[0]
		})
		stale(t, err, 4, 5)
		stale(t, errs[0], 4, 5)
		stale(t, errs[1], 4, 5)
		if errs[2] == nil {
			t.Fatal("a statement on the connection of a refused transaction ran")
		}
		if _, called := probe(); called {
			t.Fatal("nextval ran: the statement sent with a refused claim was executed")
		}
		idle()
	})

	t.Run("stale: Conn before any statement", func(t *testing.T) {
		err := lazy.Tx(ctx, pool, "sku:1", 4, func(tx pgx.Tx) error {
			_, err := tx.Conn().Exec(ctx, `SELECT nextval('probe')`)
			if err == nil {
				t.Error("a statement on the connection of a refused transaction ran")
			}
			return nil
		})
		stale(t, err, 4, 5)
		if _, called := probe(); called {
			t.Fatal("nextval ran")
		}
		idle()
	})

	t.Run("no statement: the claim alone", func(t *testing.T) {
		if err := lazy.Tx(ctx, pool, "sku:1", 6, func(pgx.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if hw := highWater(t, pool, "sku:1"); hw != 6 {
			t.Fatalf("high-water %d, want 6", hw)
		}
		stale(t, lazy.Tx(ctx, pool, "sku:1", 5, func(pgx.Tx) error { return nil }), 5, 6)
		idle()
	})

	t.Run("first statement invalid: reported as its own error", func(t *testing.T) {
		var first error
		err := lazy.Tx(ctx, pool, "sku:1", 7, func(tx pgx.Tx) error {
			_, first = tx.Exec(ctx, `SELEC 1`)
			_, err := tx.Exec(ctx, `UPDATE items SET note = 'after' WHERE id = 1`)
			return err
		})
		var pgErr *pgconn.PgError
		if !errors.As(first, &pgErr) || pgErr.Code != "42601" || errors.Is(first, postgres.ErrSchema) {
			t.Fatalf("first statement: %v, want the syntax error", first)
		}
		if err != nil {
			t.Fatal(err)
		}
		if hw := highWater(t, pool, "sku:1"); hw != 7 {
			t.Fatalf("high-water %d, want 7", hw)
		}
		idle()
	})

	t.Run("first statement fails: nothing stays, the claim included", func(t *testing.T) {
		err := lazy.Tx(ctx, pool, "sku:1", 9, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE items SET stock = 1 / (stock - stock) WHERE id = 1`)
			return err
		})
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22012" {
			t.Fatalf("Tx = %v, want division by zero", err)
		}
		if hw := highWater(t, pool, "sku:1"); hw != 7 {
			t.Fatalf("high-water %d, want 7: the claim went with the failed transaction", hw)
		}
		idle()
	})

	t.Run("every method", func(t *testing.T) {
		firsts := map[string]func(ctx context.Context, tx pgx.Tx) error{
			"Query": func(ctx context.Context, tx pgx.Tx) error {
				rows, _ := tx.Query(ctx, `SELECT g FROM generate_series(1, 3) g`)
				got, err := pgx.CollectRows(rows, pgx.RowTo[int32])
				if err == nil && len(got) != 3 {
					err = fmt.Errorf("rows %v", got)
				}
				return err
			},
			"QueryRow": func(ctx context.Context, tx pgx.Tx) error {
				var n int
				return tx.QueryRow(ctx, `SELECT 1 WHERE false`).Scan(&n) // ErrNoRows, as pgx
			},
			"Exec with an execution mode": func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `SELECT $1::int`, pgx.QueryExecModeSimpleProtocol, 1)
				return err
			},
			"SendBatch": func(ctx context.Context, tx pgx.Tx) error {
				var b pgx.Batch
				b.Queue(`SELECT 1`)
				b.Queue(`SELECT 2`)
				return tx.SendBatch(ctx, &b).Close()
			},
			"CopyFrom": func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.CopyFrom(ctx, pgx.Identifier{"items"}, []string{"id", "stock"}, pgx.CopyFromRows([][]any{{int64(100), int32(1)}}))
				return err
			},
			"Prepare": func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Prepare(ctx, "p", `SELECT 1`)
				return err
			},
			"Begin": func(ctx context.Context, tx pgx.Tx) error {
				sp, err := tx.Begin(ctx)
				if err != nil {
					return err
				}
				return sp.Commit(ctx)
			},
			"LargeObjects": func(ctx context.Context, tx pgx.Tx) error {
				lo := tx.LargeObjects()
				_, err := lo.Create(ctx, 0)
				return err
			},
			"Conn": func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Conn().Exec(ctx, `SELECT 1`)
				return err
			},
		}
		tok := token.Token(100)
		for name, first := range firsts {
			tok++
			err := lazy.Tx(ctx, pool, "sku:1", tok, func(tx pgx.Tx) error {
				if err := first(ctx, tx); err != nil && !errors.Is(err, pgx.ErrNoRows) {
					return fmt.Errorf("%s: %w", name, err)
				}
				_, err := tx.Exec(ctx, `UPDATE items SET note = $1 WHERE id = 1`, name)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if hw := highWater(t, pool, "sku:1"); hw != tok {
				t.Fatalf("%s: high-water %d, want %d", name, hw, tok)
			}
			// And refused like any other.
			err = lazy.Tx(ctx, pool, "sku:1", tok-1, func(tx pgx.Tx) error { return first(ctx, tx) })
			stale(t, err, tok-1, tok)
		}
		idle()
	})

	t.Run("fn rolls back", func(t *testing.T) {
		err := lazy.Tx(ctx, pool, "sku:1", 200, func(tx pgx.Tx) error { return tx.Rollback(ctx) })
		if !errors.Is(err, pgx.ErrTxClosed) {
			t.Fatalf("Tx = %v, want ErrTxClosed (as pgx.BeginFunc)", err)
		}
		idle()
	})
}
