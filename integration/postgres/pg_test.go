package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/harness/pgserver"
	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

func pgPool(t *testing.T, params map[string]string) *pgxpool.Pool {
	t.Helper()
	db := pgserver.Shared(t)
	cfg, err := pgxpool.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range params {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := postgres.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return pool
}

func mustExec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func itemsTable(t *testing.T, pool *pgxpool.Pool, name, keyType string) *postgres.Table {
	t.Helper()
	mustExec(t, pool, fmt.Sprintf(`CREATE TABLE %s (id %s PRIMARY KEY, stock integer NOT NULL DEFAULT 0, fence_token bigint NOT NULL DEFAULT 0)`, name, keyType))
	tb, err := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{name}, Key: "id"})
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// TestTableContextTokenOfAnotherKey: enforce.Resolve is the one rule by which
// every enforcer takes a token from the context: a zero token uses the
// context's only for the very key fenced. Inside guard.Do("sku:42") a Table
// call on row 43 with the zero token is refused (token.ErrMissing) instead of
// claiming row 43 with sku:42's token, which would lock row 43's honest
// holder, with its own lower token, out.
func TestTableContextTokenOfAnotherKey(t *testing.T) {
	ctx := context.Background()
	pool := pgPool(t, nil)
	items := itemsTable(t, pool, "items", "bigint")
	mustExec(t, pool, `INSERT INTO items (id, stock) VALUES (42, 10), (43, 10)`)

	// The honest holder of sku:43 has token 500; the holder of sku:42 has
	// 900 (a later grant of another lock: etcd revisions, memlock's shared
	// counter and clock-floored counters all grow across keys).
	in42 := token.NewContext(ctx, "sku:42", 900)
	err := items.Update(in42, pool, 43, 0, postgres.Set("stock", 0))
	if err == nil {
		errHonest := items.Update(ctx, pool, 43, 500, postgres.Set("stock", 9))
		t.Errorf("Update of row 43 with the zero token inside a context for sku:42 was accepted with sku:42's token (want an error wrapping token.ErrMissing that names both keys); the honest holder of row 43 (token 500) then got: %v", errHonest)
	} else if !errors.Is(err, token.ErrMissing) {
		t.Errorf("got %v, want an error wrapping token.ErrMissing", err)
	}
}

// TestPostgresFenceAndTxContextRule: the PostgreSQL Fence and Tx follow
// enforce.Resolve.
func TestPostgresFenceAndTxContextRule(t *testing.T) {
	ctx := context.Background()
	pool := pgPool(t, nil)
	in42 := token.NewContext(ctx, "sku:42", 900)
	f := postgres.NewFence(pool)
	if err := f.Claim(in42, "sku:43", 0); !errors.Is(err, token.ErrMissing) {
		t.Errorf("Fence.Claim(sku:43, 0) in a context for sku:42: %v, want ErrMissing", err)
	}
	if err := f.Claim(in42, "sku:42", 0); err != nil {
		t.Errorf("Fence.Claim(sku:42, 0) in its own context: %v", err)
	}
	ran := false
	err := postgres.Tx(in42, pool, "sku:43", 0, func(pgx.Tx) error { ran = true; return nil })
	if !errors.Is(err, token.ErrMissing) || ran {
		t.Errorf("Tx(sku:43, 0) in a context for sku:42: err %v, fn ran %v", err, ran)
	}
	if hw, _ := f.HighWater(ctx, "sku:43"); hw != 0 {
		t.Errorf("sku:43 mark moved to %d", hw)
	}
}

// TestTxHoldBoundIdleHolder: a holder frozen between statements (idle in
// transaction) is cut off near the hold bound, and its commit fails.
func TestTxHoldBoundIdleHolder(t *testing.T) {
	ctx := context.Background()
	pool := pgPool(t, nil)
	tokens, err := postgres.NewTokens(postgres.TokensOptions{HoldTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	frozen := make(chan struct{})
	aDone := make(chan error, 1)
	go func() {
		aDone <- tokens.Tx(ctx, pool, "sku:1", 100, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
				return err
			}
			close(frozen)
			time.Sleep(2 * time.Second)
			return nil
		})
	}()
	<-frozen
	start := time.Now()
	if err := tokens.Tx(ctx, pool, "sku:1", 200, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	waited := time.Since(start)
	aErr := <-aDone
	t.Logf("B waited %v; A's commit: %v", waited.Round(time.Millisecond), aErr)
	if waited > 1500*time.Millisecond {
		t.Errorf("B waited %v", waited)
	}
	if aErr == nil {
		t.Errorf("the frozen holder's commit succeeded after the bound")
	}
}

// TestTombstoneSpellings: tombstones of keys whose equal values the client
// can spell differently: every re-create below the deleting token is
// refused.
func TestTombstoneSpellings(t *testing.T) {
	ctx := context.Background()
	pool := pgPool(t, nil)
	mustExec(t, pool, `CREATE EXTENSION IF NOT EXISTS citext`)
	mustExec(t, pool, `CREATE DOMAIN ci_dom AS citext`)
	mustExec(t, pool, `CREATE DOMAIN num_dom AS numeric`)
	mustExec(t, pool, `CREATE DOMAIN dom_dom AS ci_dom`)
	cases := []struct {
		name, typ string
		k1, k2    any
	}{
		{"int_as_text", "bigint", int64(7), "007"},
		{"int_plus", "integer", "7", " +7 "},
		{"uuid_case", "uuid", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"},
		{"uuid_braces", "uuid", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "{a0eebc999c0b4ef8bb6d6bb9bd380a11}"},
		{"bool", "boolean", true, "yes"},
		{"char_blank", "char(4)", "ab", "ab  "},
		{"smallint", "smallint", "-0", "0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tb := itemsTable(t, pool, "t_"+c.name, c.typ)
			if err := tb.Upsert(ctx, pool, c.k1, 10, postgres.Set("stock", 1)); err != nil {
				t.Fatalf("upsert: %v", err)
			}
			if err := tb.Delete(ctx, pool, c.k1, 20); err != nil {
				t.Fatalf("delete: %v", err)
			}
			err := tb.Upsert(ctx, pool, c.k2, 15, postgres.Set("stock", 99))
			if err == nil {
				t.Errorf("row %v deleted under 20 re-created as %q under 15", c.k1, c.k2)
			} else if !errors.Is(err, token.ErrStale) {
				t.Logf("re-create refused with %v", err)
			}
		})
	}
	for _, typ := range []string{"ci_dom", "num_dom", "dom_dom", "text COLLATE \"C\"", "varchar(10)", "oid", "\"char\"", "name"} {
		t.Run("verify_"+typ, func(t *testing.T) {
			name := fmt.Sprintf("v_%d", time.Now().UnixNano()%1e9)
			tb := itemsTable(t, pool, name, typ)
			err := tb.Verify(ctx, pool)
			var kte *postgres.KeyTypeError
			t.Logf("%s: Verify → %v", typ, err)
			switch typ {
			case "ci_dom", "num_dom", "dom_dom":
				if !errors.As(err, &kte) {
					t.Errorf("%s accepted as a tombstone key", typ)
				}
			}
		})
	}
}

// Tombstones are named "<Name as configured>/<key>": two Tables over one
// table configured with and without the schema keep two tombstones, and
// a row deleted through one is re-created below the deleting token
// through the other. (The TableOptions doc asks for one Name per table:
// a documented footgun, reported as low.)
func TestTombstoneNameSpellings(t *testing.T) {
	ctx := context.Background()
	pool := pgPool(t, nil)
	a := itemsTable(t, pool, "items", "bigint")
	b, _ := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{"public", "items"}, Key: "id"})
	if err := a.Upsert(ctx, pool, 1, 10, postgres.Set("stock", 1)); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete(ctx, pool, 1, 20); err != nil {
		t.Fatal(err)
	}
	err := b.Upsert(ctx, pool, 1, 15, postgres.Set("stock", 99))
	t.Logf("re-create through {public, items} under 15 after a delete through {items} under 20: %v", err)
	// A Tx resource that happens to be named like a tombstone shares its row.
	if err := postgres.Tx(ctx, pool, "items/2", 50, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	err = a.Upsert(ctx, pool, 2, 30, postgres.Set("stock", 1))
	t.Logf("Upsert of a never-deleted row 2 under 30 after Tx(\"items/2\", 50): %v", err)
}

// Isolation levels: under REPEATABLE READ and SERIALIZABLE session defaults
// every claim must either succeed or be refused as stale, never fail with
// 40001 (the docs promise retries before anything ran). Under SERIALIZABLE
// a statement of fn itself may still fail with 40001 — PostgreSQL's
// predicate locks can see a read/write dependency through fence_tokens'
// pages that no row shares — and Tx returns it, as its doc says: that
// counts apart, never a claim's.
func TestIsolationLevels(t *testing.T) {
	for _, lvl := range []string{"repeatable read", "serializable"} {
		t.Run(lvl, func(t *testing.T) {
			ctx := context.Background()
			pool := pgPool(t, map[string]string{"default_transaction_isolation": lvl})
			items := itemsTable(t, pool, "items", "bigint")
			mustExec(t, pool, `INSERT INTO items (id) VALUES (1)`)
			mustExec(t, pool, `CREATE TABLE counter (id int PRIMARY KEY, n int NOT NULL)`)
			mustExec(t, pool, `INSERT INTO counter VALUES (1, 0)`)
			f := postgres.NewFence(pool)
			const workers, rounds = 4, 40
			errs := make(chan error, workers*rounds*3)
			var next = make(chan int64, workers*rounds)
			for i := int64(1); i <= workers*rounds; i++ {
				next <- i * 10
			}
			close(next)
			done := make(chan struct{})
			for w := 0; w < workers; w++ {
				go func() {
					defer func() { done <- struct{}{} }()
					for tok := range next {
						tk := token.Token(tok)
						errs <- postgres.Tx(ctx, pool, "r", tk, func(tx pgx.Tx) error {
							// Only fenced transactions on "r" touch counter, so the
							// claim's row lock serializes them.
							if _, err := tx.Exec(ctx, `UPDATE counter SET n = n + 1 WHERE id = 1`); err != nil {
								return fmt.Errorf("%w: %w", errInFn, err)
							}
							return nil
						})
						errs <- items.Update(ctx, pool, 1, tk, postgres.Set("stock", 5))
						errs <- f.Claim(ctx, "f", tk)
					}
				}()
			}
			for w := 0; w < workers; w++ {
				<-done
			}
			close(errs)
			var ok, stale, inFn, other int
			for err := range errs {
				var pgErr *pgconn.PgError
				switch {
				case err == nil:
					ok++
				case errors.Is(err, token.ErrStale):
					stale++
				case lvl == "serializable" && errors.Is(err, errInFn) && errors.As(err, &pgErr) && pgErr.Code == "40001":
					inFn++
				default:
					other++
					if other <= 3 {
						t.Errorf("%s: %v", lvl, err)
					}
				}
			}
			t.Logf("%s: %d accepted, %d stale, %d serialization failures of fn's own statement, %d other errors", lvl, ok, stale, inFn, other)
		})
	}
}

// errInFn marks an error of fn's own statements inside Tx.
var errInFn = errors.New("in fn")

// Reset misuse and exactness.
func TestPostgresResetMisuse(t *testing.T) {
	ctx := context.Background()
	pool := pgPool(t, nil)
	k, _ := postgres.NewTokens(postgres.TokensOptions{})
	f := k.Fence(pool)
	for _, r := range []string{"sku:1", "sku:2", "sku:10"} {
		if err := f.Claim(ctx, r, 100); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := k.Reset(ctx, pool, "", 5); !errors.Is(err, token.ErrNoResource) {
		t.Errorf("Reset(\"\"): %v", err)
	}
	if _, err := k.Reset(ctx, pool, "sku:1", 0); !errors.Is(err, token.ErrMissing) {
		t.Errorf("Reset(to 0): %v", err)
	}
	if _, err := k.Reset(ctx, pool, "sku:%", 5); err != nil {
		t.Errorf("Reset(sku:%%): %v", err)
	}
	if _, err := k.Reset(ctx, pool, "sku:1", token.MaxInt64+1); !errors.Is(err, token.ErrRange) {
		t.Errorf("Reset(2^63): %v", err)
	}
	for _, r := range []string{"sku:1", "sku:2", "sku:10"} {
		if hw, _ := f.HighWater(ctx, r); hw != 100 {
			t.Errorf("%s moved to %d", r, hw)
		}
	}
	// Poison, reset, honest holder back, nothing else moved.
	nf := postgres.NewFence(pool)
	nc, _ := postgres.NewTokens(postgres.TokensOptions{Check: token.NoCheck()})
	if err := nc.Fence(pool).Claim(ctx, "sku:2", token.MaxInt64); err != nil {
		t.Fatal(err)
	}
	if err := nf.Claim(ctx, "sku:2", 200); !errors.Is(err, token.ErrStale) {
		t.Fatalf("poisoned: %v", err)
	}
	if prev, err := nf.Reset(ctx, "sku:2", 150); err != nil || prev != token.MaxInt64 {
		t.Fatalf("reset: %d %v", prev, err)
	}
	if err := nf.Claim(ctx, "sku:2", 149); !errors.Is(err, token.ErrStale) {
		t.Errorf("after reset to 150, 149: %v", err)
	}
	if err := nf.Claim(ctx, "sku:2", 200); err != nil {
		t.Errorf("after reset, honest 200: %v", err)
	}
	if err := nc.Fence(pool).Claim(ctx, "sku:3", token.MaxInt64+1); !errors.Is(err, token.ErrRange) {
		t.Errorf("2^63 with NoCheck: %v", err)
	}
}
