package postgres_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// A token.Token goes into a bigint column of the program's own and back
// as it is, through pgx, inside a fenced transaction as anywhere: every
// token up to MaxInt64 exactly; a larger one is refused with a
// RangeError and nothing is written; a negative or NULL column does not
// scan into a Token.
func TestTokenStoredInABigintColumn(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxFor(t, time.Minute)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, `CREATE TABLE jobs (id int PRIMARY KEY, done_by bigint)`, `INSERT INTO jobs VALUES (1, NULL), (2, -5), (3, NULL)`)
	marks, err := postgres.NewTokens(postgres.TokensOptions{Check: token.NoCheck()})
	if err != nil {
		t.Fatal(err)
	}
	for i, tk := range []token.Token{1, 1 << 53, token.MaxInt64} {
		err := marks.Tx(ctx, pool, "job:1", token.Token(i+1), func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE jobs SET done_by = $1 WHERE id = 1`, tk)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		var got token.Token
		var raw int64
		if err := pool.QueryRow(ctx, `SELECT done_by, done_by FROM jobs WHERE id = 1`).Scan(&got, &raw); err != nil {
			t.Fatal(err)
		}
		if got != tk || raw != int64(tk) {
			t.Fatalf("stored %d, read back %d (column %d)", tk, got, raw)
		}
	}
	_, err = pool.Exec(ctx, `UPDATE jobs SET done_by = $1 WHERE id = 1`, token.MaxInt64+1)
	if !errors.Is(err, token.ErrRange) {
		t.Fatalf("storing MaxInt64+1: %v, want a RangeError", err)
	}
	var got token.Token
	if err := pool.QueryRow(ctx, `SELECT done_by FROM jobs WHERE id = 1`).Scan(&got); err != nil || got != token.MaxInt64 {
		t.Fatalf("after the refusal: %d, %v, want MaxInt64 unchanged", got, err)
	}
	for _, id := range []int{2, 3} { // -5, NULL
		got = 7
		err := pool.QueryRow(ctx, `SELECT done_by FROM jobs WHERE id = $1`, id).Scan(&got)
		if !errors.Is(err, token.ErrInvalid) || got != 7 {
			t.Fatalf("scanning a negative or NULL column: %d, %v, want ErrInvalid", got, err)
		}
	}
}
