package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// statements counts the statements sent through a DB.
type statements struct {
	postgres.DB
	n int
}

func (s *statements) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	s.n++
	return s.DB.QueryRow(ctx, sql, args...)
}

// An accepted Update with Returning scans the updated row into its
// destinations in the one statement that makes the update: the plain
// form (values) and the computed form (Add, Where) alike.
func TestUpdateReturningScansTheUpdatedRow(t *testing.T) {
	t.Parallel()
	pool, items := setup(t)
	ctx := ctxFor(t, time.Minute)
	db := &statements{DB: pool}

	var stock int
	var mark int64
	var note *string
	err := items.Update(ctx, db, 1, 5, postgres.Set("stock", 7), postgres.Set("note", "n"),
		postgres.Returning("stock", &stock), postgres.Returning("note", &note), postgres.Returning("fence_token", &mark))
	if err != nil {
		t.Fatal(err)
	}
	if stock != 7 || note == nil || *note != "n" || mark != 5 || db.n != 1 {
		t.Fatalf("Set with Returning: stock %d note %v mark %d in %d statements, want 7, n, 5 in 1", stock, note, mark, db.n)
	}

	db.n = 0
	err = items.Update(ctx, db, 1, 6, postgres.Add("stock", -3), postgres.Where("stock >= $1", 3),
		postgres.Returning("stock", &stock))
	if err != nil {
		t.Fatal(err)
	}
	if stock != 4 || db.n != 1 {
		t.Fatalf("debit with Returning: stock %d in %d statements, want 4 in 1", stock, db.n)
	}
	if got, mark := row(t, pool, 1); got != 4 || mark != 6 {
		t.Fatalf("row: stock %d mark %d, want 4 and 6", got, mark)
	}

	// An expression without a condition, and the same shapes again (the
	// statement texts are cached per shape).
	for range 2 {
		err = items.Update(ctx, pool, 1, 6, postgres.Set("stock", postgres.Expr("stock * $1", 2)), postgres.Returning("stock", &stock))
		if err != nil {
			t.Fatal(err)
		}
		want := stock
		if got, _ := row(t, pool, 1); got != want {
			t.Fatalf("Expr with Returning scanned %d, row has %d", want, got)
		}
	}
	if stock != 16 {
		t.Fatalf("stock %d after doubling twice from 4, want 16", stock)
	}
}

// A refused Update with Returning is refused exactly as without it —
// stale, no such row, condition not true — and leaves its destination
// untouched; the condition's refusal still claims the row.
func TestUpdateReturningRefusals(t *testing.T) {
	t.Parallel()
	pool, items := setup(t)
	ctx := ctxFor(t, time.Minute)
	if err := items.Update(ctx, pool, 1, 5, postgres.Set("stock", 2)); err != nil {
		t.Fatal(err)
	}
	const untouched = -1
	debit := func(n int) []postgres.Clause {
		return []postgres.Clause{postgres.Add("stock", -n), postgres.Where("stock >= $1", n)}
	}
	for _, c := range []struct {
		name  string
		key   int64
		tok   token.Token
		set   []postgres.Clause
		check func(t *testing.T, err error)
		stock int
		mark  int64
	}{
		{"plain, stale", 1, 4, []postgres.Clause{postgres.Set("stock", 9)},
			func(t *testing.T, err error) { stale(t, err, 4, 5) }, 2, 5},
		{"debit, stale", 1, 4, debit(1),
			func(t *testing.T, err error) { stale(t, err, 4, 5) }, 2, 5},
		{"debit, stale and the condition false", 1, 4, debit(3),
			func(t *testing.T, err error) { stale(t, err, 4, 5) }, 2, 5},
		{"plain, no row", 2, 6, []postgres.Clause{postgres.Set("stock", 9)},
			func(t *testing.T, err error) { refusedWith(t, err, postgres.ErrNoRow) }, 2, 5},
		{"debit, no row", 2, 6, debit(1),
			func(t *testing.T, err error) { refusedWith(t, err, postgres.ErrNoRow) }, 2, 5},
		{"debit, condition false", 1, 6, debit(3), func(t *testing.T, err error) {
			var ce *postgres.ConditionError
			if !errors.As(err, &ce) || !errors.Is(err, postgres.ErrCondition) || ce.Token != 6 {
				t.Fatalf("got %v, want a ConditionError claimed for 6", err)
			}
		}, 2, 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			stock := untouched
			err := items.Update(ctx, pool, c.key, c.tok, append(c.set, postgres.Returning("stock", &stock))...)
			c.check(t, err)
			if stock != untouched {
				t.Fatalf("destination set to %d on a refusal", stock)
			}
			if got, mark := row(t, pool, 1); got != c.stock || mark != c.mark {
				t.Fatalf("row 1: stock %d mark %d, want %d and %d", got, mark, c.stock, c.mark)
			}
		})
	}
}

// Returning is checked like the rest of an Update: no Update of nothing
// but Returning, none in Upsert, no empty column; a column the table does
// not have fails the statement as a whole.
func TestUpdateReturningBadInput(t *testing.T) {
	t.Parallel()
	pool, items := setup(t)
	ctx := ctxFor(t, time.Minute)
	var stock int
	before := dump(t, pool, "items", "fence_tokens")
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"only Returning", items.Update(ctx, pool, 1, 5, postgres.Returning("stock", &stock)), postgres.ErrBadInput},
		{"Where and Returning", items.Update(ctx, pool, 1, 5, postgres.Where("stock > 0"), postgres.Returning("stock", &stock)), postgres.ErrBadInput},
		{"Upsert", items.Upsert(ctx, pool, 1, 5, postgres.Set("stock", 1), postgres.Returning("stock", &stock)), postgres.ErrBadInput},
		{"empty column", items.Update(ctx, pool, 1, 5, postgres.Set("stock", 1), postgres.Returning("", &stock)), postgres.ErrBadInput},
		{"into an Expression", items.Update(ctx, pool, 1, 5, postgres.Set("stock", 1), postgres.Returning("stock", postgres.Expr("1"))), postgres.ErrBadInput},
		{"unknown column", items.Update(ctx, pool, 1, 5, postgres.Set("stock", 1), postgres.Returning("stokc", &stock)), postgres.ErrSchema},
		{"unknown column, computed", items.Update(ctx, pool, 1, 5, postgres.Add("stock", 1), postgres.Where("stock > 0"), postgres.Returning("stokc", &stock)), postgres.ErrSchema},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, c.err, c.want)
		}
		var ce *postgres.ColumnError
		if errors.Is(c.want, postgres.ErrSchema) && (!errors.As(c.err, &ce) || ce.Column != "stokc") {
			t.Errorf("%s: got %v, want a ColumnError naming stokc", c.name, c.err)
		}
	}
	if after := dump(t, pool, "items", "fence_tokens"); after != before {
		t.Fatalf("wrote:\n%s\nwas:\n%s", after, before)
	}
}

func refusedWith(t *testing.T, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("got %v, want %v", err, want)
	}
}
