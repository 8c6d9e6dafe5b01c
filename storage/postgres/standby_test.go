package postgres_test

import (
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

// eventually retries f until it succeeds or a minute has passed.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Every acceptance, an equal token included, is a conditional write on
// the server: through a connection to a hot standby — which serves the
// marks, replicated, to reads — every path fails with the server's
// read-only error instead of accepting the token the mark already holds.
func TestHotStandbyFailsClosed(t *testing.T) {
	t.Parallel()
	primary := pgserver.New(t)
	ctx := ctxFor(t, 2*time.Minute)
	pp, err := pgxpool.New(ctx, pgserver.DSN(primary))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pp.Close)
	if err := postgres.Migrate(ctx, pp); err != nil {
		t.Fatal(err)
	}
	exec(t, pp, `CREATE TABLE items (id bigint PRIMARY KEY, stock int NOT NULL DEFAULT 0, note text, fence_token bigint NOT NULL DEFAULT 0)`,
		`INSERT INTO items (id, stock) VALUES (1, 10)`)
	items := newTable(t, postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id"})
	if err := items.Update(ctx, pp, 1, 5, postgres.Set("stock", 9)); err != nil {
		t.Fatal(err)
	}
	if err := postgres.NewFence(pp).Claim(ctx, "sku:1", 5); err != nil {
		t.Fatal(err)
	}
	standby := pgserver.NewStandby(t, primary)
	var sp *pgxpool.Pool
	eventually(t, "connecting to the standby", func() error {
		if !standby.Running() {
			t.Fatal("the standby exited")
		}
		p, err := pgxpool.New(ctx, pgserver.DSN(standby))
		if err == nil {
			if err = p.Ping(ctx); err != nil {
				p.Close()
			}
		}
		sp = p
		return err
	})
	t.Cleanup(sp.Close)
	eventually(t, "the standby replaying the marks", func() error {
		var recovering bool
		var mark, hw int64
		err := sp.QueryRow(ctx, `SELECT pg_is_in_recovery(), (SELECT fence_token FROM items WHERE id = 1),
 (SELECT token FROM fence_tokens WHERE resource = 'sku:1')`).Scan(&recovering, &mark, &hw)
		if err == nil && (!recovering || mark != 5 || hw != 5) {
			err = fmt.Errorf("in recovery %v, marks %d and %d", recovering, mark, hw)
		}
		return err
	})
	lazy, err := postgres.NewTokens(postgres.TokensOptions{ClaimWithFirstStatement: true})
	if err != nil {
		t.Fatal(err)
	}
	var stock int
	fnRan := false
	fn := func(tx pgx.Tx) error {
		fnRan = true
		return tx.QueryRow(ctx, `SELECT stock FROM items WHERE id = 1`).Scan(&stock)
	}
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"Read, the equal token", func() error { return items.Read(ctx, sp, 1, 5, []string{"stock"}, &stock) }},
		{"Read, a higher token", func() error { return items.Read(ctx, sp, 1, 6, []string{"stock"}, &stock) }},
		{"Update, the equal token", func() error { return items.Update(ctx, sp, 1, 5, postgres.Set("stock", 0)) }},
		{"Upsert, the equal token", func() error { return items.Upsert(ctx, sp, 1, 5, postgres.Set("stock", 0)) }},
		{"Delete, the equal token", func() error { return items.Delete(ctx, sp, 1, 5) }},
		{"Tx, the equal token", func() error { return postgres.Tx(ctx, sp, "sku:1", 5, fn) }},
		{"Tx claiming with the first statement, the equal token", func() error { return lazy.Tx(ctx, sp, "sku:1", 5, fn) }},
		{"Fence, the equal token", func() error { return postgres.NewFence(sp).Claim(ctx, "sku:1", 5) }},
		{"Fence, a higher token", func() error { return postgres.NewFence(sp).Claim(ctx, "sku:1", 6) }},
		{"Fence.Reset", func() error {
			_, err := postgres.NewFence(sp).Reset(ctx, "sku:1", 7)
			return err
		}},
		{"Table.Reset", func() error {
			_, err := newTable(t, postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id", Logger: discard}).Reset(ctx, sp, 1, 7)
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			stock, fnRan = -1, false
			err := c.call()
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "25006" { // read_only_sql_transaction
				t.Fatalf("on a hot standby: %v, want the read-only error", err)
			}
			if errors.Is(err, token.ErrStale) || errors.Is(err, postgres.ErrNoRow) {
				t.Fatalf("on a hot standby: %v, want only the read-only error", err)
			}
			if fnRan && stock != -1 {
				t.Fatal("fn read under a claim the standby cannot have made")
			}
		})
	}
}
