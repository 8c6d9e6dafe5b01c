package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/harness/pgserver"
	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// isolationLevels are the levels above READ COMMITTED, as
// default_transaction_isolation spells them.
var isolationLevels = []string{"repeatable read", "serializable"}

// isoSetup is setup on a pool whose sessions default to level, as a
// caller sets it (default_transaction_isolation on the connection).
func isoSetup(t *testing.T, level string) (*pgxpool.Pool, *postgres.Table) {
	t.Helper()
	pg := pgserver.Shared(t)
	cfg, err := pgxpool.ParseConfig(pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 24
	cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = level
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ctx := ctxFor(t, time.Minute)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	exec(t, pool,
		`CREATE TABLE items (id bigint PRIMARY KEY, stock int NOT NULL DEFAULT 0, note text, fence_token bigint NOT NULL DEFAULT 0)`,
		`INSERT INTO items (id, stock) VALUES (1, 10)`,
		`CREATE TABLE hist (seq bigserial PRIMARY KEY, token bigint NOT NULL, note text)`)
	var got string
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT current_setting('transaction_isolation')`).Scan(&got)
	}); err != nil || got != level {
		t.Fatalf("transaction_isolation %q, %v; want %q", got, err, level)
	}
	return pool, newTable(t, postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id"})
}

// The concurrent read-modify-writes of TestTxConcurrentTokens (8 holders,
// 320 fenced transactions on one resource) under REPEATABLE READ and
// SERIALIZABLE, in both Tx modes, and the same for column mode: a claim
// that waited for a holder who then committed fails there with SQLSTATE
// 40001 (its snapshot predates that commit), and is retried before fn
// runs, so every transaction is either committed or refused as stale —
// none fails with a serialization error — and no update is lost.
func TestIsolationLevels(t *testing.T) {
	t.Parallel()
	for _, level := range isolationLevels {
		t.Run(level, func(t *testing.T) {
			for _, lazy := range []bool{false, true} {
				t.Run(fmt.Sprintf("Tx, ClaimWithFirstStatement %v", lazy), func(t *testing.T) {
					pool, _ := isoSetup(t, level)
					marks, err := postgres.NewTokens(postgres.TokensOptions{ClaimWithFirstStatement: lazy})
					if err != nil {
						t.Fatal(err)
					}
					hist := runWritersN(t, 8, 40, func(ctx context.Context, tok token.Token, note string, rmw bool) error {
						return marks.Tx(ctx, pool, "sku:1", tok, func(tx pgx.Tx) error {
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
				})
			}
			t.Run("column mode", func(t *testing.T) {
				pool, items := isoSetup(t, level)
				exec(t, pool, `CREATE FUNCTION log_items() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.note IS DISTINCT FROM OLD.note THEN
		INSERT INTO hist (token, note) VALUES (NEW.fence_token, NEW.note);
	END IF;
	RETURN NULL;
END $$`,
					`CREATE TRIGGER log AFTER UPDATE ON items FOR EACH ROW EXECUTE FUNCTION log_items()`)
				hist := runWritersN(t, 8, 40, func(ctx context.Context, tok token.Token, note string, rmw bool) error {
					if rmw {
						var stock int
						if err := items.Read(ctx, pool, 1, tok, []string{"stock"}, &stock); err != nil {
							return err
						}
						return items.Update(ctx, pool, 1, tok, postgres.Set("stock", stock+1), postgres.Set("note", note))
					}
					return items.Update(ctx, pool, 1, tok, postgres.Set("note", note))
				}, pool, `SELECT token, note FROM hist ORDER BY seq`)
				checkFinal(t, pool, hist)
			})
		})
	}
}

// What the retry means, step by step: a holder's claim waits for the
// current holder; that one commits a write; the waiting claim fails with
// 40001 under its first snapshot and is retried, and its fn then sees the
// write — "a higher token waits for this commit". Inside the caller's own
// transaction the claim cannot be retried: the error says so and carries
// the server's 40001.
func TestIsolationWaitsForCommit(t *testing.T) {
	t.Parallel()
	for _, level := range isolationLevels {
		for _, lazy := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, ClaimWithFirstStatement %v", level, lazy), func(t *testing.T) {
				pool, _ := isoSetup(t, level)
				ctx := ctxFor(t, time.Minute)
				marks, err := postgres.NewTokens(postgres.TokensOptions{ClaimWithFirstStatement: lazy})
				if err != nil {
					t.Fatal(err)
				}
				if err := marks.Tx(ctx, pool, "sku:1", 1, func(pgx.Tx) error { return nil }); err != nil {
					t.Fatal(err)
				}
				inside, release := make(chan struct{}), make(chan struct{})
				errA := make(chan error, 1)
				go func() {
					errA <- marks.Tx(ctx, pool, "sku:1", 5, func(tx pgx.Tx) error {
						if _, err := tx.Exec(ctx, `UPDATE items SET stock = 4 WHERE id = 1`); err != nil {
							return err
						}
						close(inside)
						<-release
						return nil
					})
				}()
				<-inside
				errB := make(chan error, 1)
				var seen int
				go func() {
					errB <- marks.Tx(ctx, pool, "sku:1", 6, func(tx pgx.Tx) error {
						return tx.QueryRow(ctx, `SELECT stock FROM items WHERE id = 1`).Scan(&seen)
					})
				}()
				waitBlocked(t, pool, 1)
				close(release)
				if err := <-errA; err != nil {
					t.Fatal(err)
				}
				if err := <-errB; err != nil {
					t.Fatalf("the waiting holder: %v", err)
				}
				if seen != 4 {
					t.Fatalf("the waiting holder read stock %d, want the first holder's 4", seen)
				}
			})
		}
		t.Run(level+", nested", func(t *testing.T) {
			pool, _ := isoSetup(t, level)
			ctx := ctxFor(t, time.Minute)
			inside, release := make(chan struct{}), make(chan struct{})
			errA := make(chan error, 1)
			go func() {
				errA <- postgres.Tx(ctx, pool, "sku:1", 5, func(pgx.Tx) error {
					close(inside)
					<-release
					return nil
				})
			}()
			<-inside
			outer, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer outer.Rollback(context.Background())
			errB := make(chan error, 1)
			go func() { errB <- postgres.Tx(ctx, outer, "sku:1", 6, func(pgx.Tx) error { return nil }) }()
			waitBlocked(t, pool, 1)
			close(release)
			if err := <-errA; err != nil {
				t.Fatal(err)
			}
			err = <-errB
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "40001" || !strings.Contains(err.Error(), "retry of that whole transaction") {
				t.Fatalf("nested claim = %v, want the serialization failure and what to do", err)
			}
		})
	}
}
