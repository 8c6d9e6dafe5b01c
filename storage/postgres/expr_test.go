package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// sellOne is the canonical decrement: UPDATE items SET stock = stock - 1
// WHERE id = $1 AND stock > 0, fenced.
func sellOne(ctx context.Context, items *postgres.Table, db postgres.DB, id int64, tok token.Token) error {
	return items.Update(ctx, db, id, tok, postgres.Add("stock", -1), postgres.Where("stock > 0"))
}

func condErr(t *testing.T, err error, resource string, tok token.Token) {
	t.Helper()
	var ce *postgres.ConditionError
	if !errors.As(err, &ce) || !errors.Is(err, postgres.ErrCondition) {
		t.Fatalf("err = %v, want a ConditionError", err)
	}
	if ce.Resource != resource || ce.Token != tok || len(ce.Conditions) == 0 {
		t.Fatalf("ConditionError %+v, want resource %q token %d and the conditions", ce, resource, tok)
	}
	if errors.Is(err, token.ErrStale) || errors.Is(err, postgres.ErrNoRow) {
		t.Fatalf("a ConditionError is also stale or no-row: %v", err)
	}
}

// The three refusals of a conditional Update, told apart: stale, no such
// row, condition not true; and what each leaves in the row.
func TestUpdateExprOutcomes(t *testing.T) {
	t.Parallel()
	pool, items := setup(t)
	ctx := ctxFor(t, time.Minute)
	exec(t, pool, `UPDATE items SET stock = 2 WHERE id = 1`)

	for i := range 2 {
		if err := sellOne(ctx, items, pool, 1, 5); err != nil {
			t.Fatalf("sale %d: %v", i+1, err)
		}
	}
	if stock, mark := row(t, pool, 1); stock != 0 || mark != 5 {
		t.Fatalf("row = stock %d mark %d, want 0 and 5", stock, mark)
	}
	// Out of stock, same holder: condition false, nothing assigned.
	condErr(t, sellOne(ctx, items, pool, 1, 5), "items/1", 5)
	// Out of stock, a newer holder: condition false, and the row is
	// claimed — a holder with 6 cannot then change what 7 saw.
	condErr(t, sellOne(ctx, items, pool, 1, 7), "items/1", 7)
	if stock, mark := row(t, pool, 1); stock != 0 || mark != 7 {
		t.Fatalf("row = stock %d mark %d, want 0 and 7 (the condition's read claims)", stock, mark)
	}
	stale(t, items.Update(ctx, pool, 1, 6, postgres.Set("stock", 5)), 6, 7)
	// Stale and condition false at once: stale.
	stale(t, sellOne(ctx, items, pool, 1, 6), 6, 7)
	// Stale with the condition true: stale, nothing assigned.
	exec(t, pool, `UPDATE items SET stock = 3 WHERE id = 1`)
	stale(t, sellOne(ctx, items, pool, 1, 6), 6, 7)
	if stock, mark := row(t, pool, 1); stock != 3 || mark != 7 {
		t.Fatalf("row = stock %d mark %d, want 3 and 7 after stale refusals", stock, mark)
	}
	// No such row.
	if err := sellOne(ctx, items, pool, 99, 8); !errors.Is(err, postgres.ErrNoRow) {
		t.Fatalf("sell of a missing row = %v, want ErrNoRow", err)
	}
	// A NULL condition is not true.
	condErr(t, items.Update(ctx, pool, 1, 7, postgres.Add("stock", -1), postgres.Where("note = $1", "x")), "items/1", 7)
	// Expressions, several conditions, arguments renumbered past the
	// assignments' own.
	err := items.Update(ctx, pool, 1, 8,
		postgres.Set("note", "n:"+"$1"),
		postgres.Set("stock", postgres.Expr("stock * $1 - $2", 10, 4)),
		postgres.Where("stock >= $1", 3),
		postgres.Where("id = $1 AND stock < $2", 1, 100))
	if err != nil {
		t.Fatal(err)
	}
	var note string
	if err := pool.QueryRow(ctx, `SELECT note FROM items WHERE id = 1`).Scan(&note); err != nil {
		t.Fatal(err)
	}
	if stock, mark := row(t, pool, 1); stock != 26 || mark != 8 || note != "n:$1" {
		t.Fatalf("row = stock %d mark %d note %q, want 26, 8, n:$1", stock, mark, note)
	}
	// An expression alone, no condition: a stale one is refused.
	stale(t, items.Update(ctx, pool, 1, 7, postgres.Add("stock", 1)), 7, 8)
	if err := items.Update(ctx, pool, 1, 8, postgres.Add("stock", 1)); err != nil {
		t.Fatal(err)
	}
	if err := items.Update(ctx, pool, 99, 8, postgres.Add("stock", 1)); !errors.Is(err, postgres.ErrNoRow) {
		t.Fatalf("Add on a missing row = %v, want ErrNoRow", err)
	}
	if stock, _ := row(t, pool, 1); stock != 27 {
		t.Fatalf("stock %d, want 27", stock)
	}
	// The token from the context, as for Set.
	if err := sellOne(token.NewContext(ctx, "items/1", 9), items, pool, 1, 0); err != nil {
		t.Fatal(err)
	}
	if stock, mark := row(t, pool, 1); stock != 26 || mark != 9 {
		t.Fatalf("row = stock %d mark %d, want 26 and 9", stock, mark)
	}
	// In a caller's transaction: the refusals too.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := items.Update(ctx, tx, 1, 10, postgres.Add("stock", -26), postgres.Where("stock >= $1", 26)); err != nil {
		t.Fatal(err)
	}
	condErr(t, sellOne(ctx, items, tx, 1, 10), "items/1", 10)
	stale(t, sellOne(ctx, items, tx, 1, 9), 9, 10)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if stock, mark := row(t, pool, 1); stock != 0 || mark != 10 {
		t.Fatalf("row = stock %d mark %d, want 0 and 10", stock, mark)
	}
}

// The condition is checked against the row version the write locks, not
// the statement's snapshot: a restock committed while the sale waits for
// the row lock is seen, and a sale of the last unit committed meanwhile
// makes the condition false.
func TestUpdateExprWaitsForCommit(t *testing.T) {
	t.Parallel()
	pool, items := setup(t)
	ctx := ctxFor(t, time.Minute)
	exec(t, pool, `UPDATE items SET stock = 1, fence_token = 5 WHERE id = 1`)
	for _, c := range []struct {
		name    string
		holder  string // what the transaction holding the row commits
		wantErr bool
		stock   int
	}{
		{"sold out meanwhile", `UPDATE items SET stock = 0 WHERE id = 1`, true, 0},
		{"restocked meanwhile", `UPDATE items SET stock = 1 WHERE id = 1`, false, 0},
	} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		exec(t, tx, c.holder)
		done := make(chan error, 1)
		go func() { done <- sellOne(ctx, items, pool, 1, 5) }()
		waitBlocked(t, pool, 1)
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		err = <-done
		if c.wantErr {
			condErr(t, err, "items/1", 5)
		} else if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if stock, _ := row(t, pool, 1); stock != c.stock {
			t.Fatalf("%s: stock %d, want %d", c.name, stock, c.stock)
		}
	}
}

// N holders selling concurrently never oversell, and stale tokens are
// refused: every holder presents a token from a shared, rising clock, so
// holders keep being overtaken; every sale is exactly one unit, and the
// stock ends at the initial stock minus the sales, never below zero.
func TestUpdateExprConcurrentSales(t *testing.T) {
	t.Parallel()
	pool, items := setup(t)
	ctx := ctxFor(t, 2*time.Minute)
	const stock = 60
	exec(t, pool, `UPDATE items SET stock = 60 WHERE id = 1`,
		`ALTER TABLE items ADD CONSTRAINT no_oversell CHECK (stock >= 0)`)

	for _, rising := range []bool{false, true} {
		exec(t, pool, `UPDATE items SET stock = 60 WHERE id = 1`)
		var clock atomic.Int64
		clock.Store(100)
		if rising {
			clock.Store(1000)
		}
		base := clock.Load()
		var sold, stales, conds atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for {
					tok := token.Token(base)
					if rising { // a new grant per attempt, some slow to act
						tok = token.Token(interleaved(&clock))
					}
					err := sellOne(ctx, items, pool, 1, tok)
					var se *token.StaleError
					switch {
					case err == nil:
						sold.Add(1)
					case errors.As(err, &se):
						if se.Current <= se.Presented {
							t.Errorf("StaleError %+v: current not above presented", se)
							return
						}
						stales.Add(1)
					case errors.Is(err, postgres.ErrCondition):
						conds.Add(1)
						return // sold out
					default:
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		left, _ := row(t, pool, 1)
		if sold.Load() != stock || left != 0 {
			t.Fatalf("rising=%v: sold %d, left %d; want %d sold and 0 left", rising, sold.Load(), left, stock)
		}
		if rising && stales.Load() == 0 {
			t.Fatalf("rising tokens: no stale refusal in %d sales", sold.Load())
		}
		t.Logf("rising=%v: sold %d, stale refusals %d, sold-out answers %d", rising, sold.Load(), stales.Load(), conds.Load())
	}
}

// Hostile input: values, column names and condition arguments that look
// like SQL are stored or compared as data, or refused with a typed error
// before anything is sent; the table is unchanged by every refusal.
func TestUpdateExprHostileInput(t *testing.T) {
	t.Parallel()
	pool, items := setup(t)
	ctx := ctxFor(t, time.Minute)
	exec(t, pool, `UPDATE items SET fence_token = 5 WHERE id = 1`,
		`INSERT INTO items (id, stock, note) VALUES (2, 3, 'keep')`)
	hostile := []string{
		`'; DROP TABLE items; --`,
		`x' OR '1'='1`,
		`$1`, `$2 $3`, `$$ $$`, `\'); DELETE FROM items; --`,
		`") OR (true`, "a\x00b", `/* */ --`, `0) OR (1=1`,
	}
	var note string
	readNote := func() string {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT note FROM items WHERE id = 1`).Scan(&note); err != nil {
			t.Fatal(err)
		}
		return note
	}
	for _, h := range hostile {
		// A value is data, NUL included (refused by the server for text,
		// as any value it cannot store).
		err := items.Update(ctx, pool, 1, 5, postgres.Add("stock", 0), postgres.Set("note", postgres.Expr("$1", h)), postgres.Where("note IS DISTINCT FROM $1", h))
		if h == "a\x00b" {
			if err == nil {
				t.Fatalf("a NUL in a text value was stored")
			}
		} else {
			if err != nil {
				t.Fatalf("value %q: %v", h, err)
			}
			if got := readNote(); got != h {
				t.Fatalf("value %q stored as %q", h, got)
			}
			// The same value as a condition's argument: compared, not run.
			condErr(t, items.Update(ctx, pool, 1, 5, postgres.Add("stock", -1), postgres.Where("note <> $1", h)), "items/1", 5)
			if err := items.Update(ctx, pool, 1, 5, postgres.Set("note", h), postgres.Where("note = $1", h)); err != nil {
				t.Fatalf("value %q as a plain Set with its condition: %v", h, err)
			}
		}
	}
	before := dump(t, pool, "items", "fence_tokens")
	for _, c := range []struct {
		name string
		set  []postgres.Clause
		want error
	}{
		// Column names are quoted: a name that tries to break out names a
		// column that does not exist.
		{"column name injection", []postgres.Clause{postgres.Set(`stock" = 0, fence_token = 0 --`, 1)}, postgres.ErrSchema},
		{"Add column injection", []postgres.Clause{postgres.Add(`stock" = 0; --`, 1)}, postgres.ErrSchema},
		{"Expr column injection", []postgres.Clause{postgres.Set(`note" = 'x', "stock`, postgres.Expr("$1", 1))}, postgres.ErrSchema},
		{"NUL in a column name", []postgres.Clause{postgres.Add("sto\x00ck", 1)}, postgres.ErrBadInput},
		{"Add to the token column", []postgres.Clause{postgres.Add("fence_token", -100)}, postgres.ErrBadInput},
		{"Expr to the key column", []postgres.Clause{postgres.Set("id", postgres.Expr("id + $1", 1))}, postgres.ErrBadInput},
		// Fragments are the program's SQL, but one that could leave its
		// parentheses — and escape the token check — is refused.
		{"fragment closes its parenthesis", []postgres.Clause{postgres.Add("stock", -1), postgres.Where("stock > 0) OR (true")}, postgres.ErrBadInput},
		{"fragment opens a parenthesis", []postgres.Clause{postgres.Add("stock", -1), postgres.Where("(stock > 0")}, postgres.ErrBadInput},
		{"fragment with a semicolon", []postgres.Clause{postgres.Set("stock", postgres.Expr("0; DELETE FROM items"))}, postgres.ErrBadInput},
		{"fragment with a line comment", []postgres.Clause{postgres.Add("stock", -1), postgres.Where("stock > 0 --")}, postgres.ErrBadInput},
		{"fragment with a block comment", []postgres.Clause{postgres.Add("stock", -1), postgres.Where("stock > 0 /* x */")}, postgres.ErrBadInput},
		{"fragment with an unterminated string", []postgres.Clause{postgres.Add("stock", -1), postgres.Where("note = 'x")}, postgres.ErrBadInput},
		{"fragment with an unterminated identifier", []postgres.Clause{postgres.Add("stock", -1), postgres.Where(`"note = 'x'`)}, postgres.ErrBadInput},
		{"fragment with a backslash", []postgres.Clause{postgres.Add("stock", -1), postgres.Where(`note = E'\') OR (true'`)}, postgres.ErrBadInput},
		{"fragment with a backslash in a string", []postgres.Clause{postgres.Add("stock", -1), postgres.Where(`note <> 'a\b'`)}, postgres.ErrBadInput},
		{"fragment with dollar quoting", []postgres.Clause{postgres.Add("stock", -1), postgres.Where(`note = $q$) OR (true$q$`)}, postgres.ErrBadInput},
		{"fragment with $ in a word", []postgres.Clause{postgres.Set("stock", postgres.Expr("1$1", 1))}, postgres.ErrBadInput},
		{"fragment with a NUL", []postgres.Clause{postgres.Add("stock", -1), postgres.Where("stock > 0\x00")}, postgres.ErrBadInput},
		{"empty fragment", []postgres.Clause{postgres.Add("stock", -1), postgres.Where(" ")}, postgres.ErrBadInput},
		{"placeholder beyond the arguments", []postgres.Clause{postgres.Add("stock", -1), postgres.Where("stock > $2", 1)}, postgres.ErrBadInput},
		{"placeholder $0", []postgres.Clause{postgres.Add("stock", -1), postgres.Where("stock > $0", 1)}, postgres.ErrBadInput},
		{"argument not used", []postgres.Clause{postgres.Set("stock", postgres.Expr("stock - $1", 1, 2))}, postgres.ErrBadInput},
		{"token placeholder without arguments", []postgres.Clause{postgres.Set("stock", postgres.Expr("$1"))}, postgres.ErrBadInput},
		{"an Expression as an argument", []postgres.Clause{postgres.Set("stock", postgres.Expr("$1", postgres.Expr("0")))}, postgres.ErrBadInput},
		{"a condition only", []postgres.Clause{postgres.Where("stock > 0")}, postgres.ErrBadInput},
		{"column twice", []postgres.Clause{postgres.Add("stock", 1), postgres.Set("stock", 1)}, postgres.ErrBadInput},
		// Typos name the column.
		{"typo in Add", []postgres.Clause{postgres.Add("stokc", -1), postgres.Where("stock > 0")}, postgres.ErrSchema},
		{"typo in a condition", []postgres.Clause{postgres.Add("stock", -1), postgres.Where("stokc > 0")}, postgres.ErrSchema},
		// A type error in a fragment is the fragment's, not the schema's.
		{"type error in a condition", []postgres.Clause{postgres.Add("stock", -1), postgres.Where("note > 5")}, nil},
	} {
		err := items.Update(ctx, pool, 1, 6, c.set...)
		if c.want == nil {
			if err == nil || errors.Is(err, postgres.ErrSchema) || errors.Is(err, postgres.ErrBadInput) {
				t.Errorf("%s: %v, want the server's error about the fragment", c.name, err)
			}
		} else if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if after := dump(t, pool, "items", "fence_tokens"); after != before {
			t.Fatalf("%s changed the tables:\n%s\nthen\n%s", c.name, before, after)
		}
	}
	// Literal strings and quoted identifiers in a fragment are fine, $1
	// inside them is not a placeholder.
	if err := items.Update(ctx, pool, 2, 6, postgres.Set("note", postgres.Expr(`'(' || "note" || ' $1 ;--'`)), postgres.Where(`note <> ')$1'`)); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT note FROM items WHERE id = 2`).Scan(&note); err != nil || note != "(keep $1 ;--" {
		t.Fatalf("note = %q, %v; want %q", note, err, "(keep $1 ;--")
	}
	// Upsert takes values only.
	if err := items.Upsert(ctx, pool, 3, 6, postgres.Add("stock", 1)); !errors.Is(err, postgres.ErrBadInput) {
		t.Fatalf("Upsert with Add = %v, want ErrBadInput", err)
	}
}

// A typo in a column name names the column; the key and token columns
// missing are the schema's fault.
func TestUnknownColumn(t *testing.T) {
	t.Parallel()
	pool, items := setup(t)
	ctx := ctxFor(t, time.Minute)
	exec(t, pool, `CREATE TABLE nofence (id bigint PRIMARY KEY, stock int)`, `INSERT INTO nofence VALUES (1, 10)`)
	nofence := newTable(t, postgres.TableOptions{Name: pgx.Identifier{"nofence"}, Key: "id"})
	wrongKey := newTable(t, postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "sku"})
	var stock int
	for _, c := range []struct {
		name   string
		err    error
		column string
		schema bool
	}{
		{"Set", items.Update(ctx, pool, 1, 5, postgres.Set("stokc", 1)), "stokc", false},
		{"Set, quoted capitals", items.Update(ctx, pool, 1, 5, postgres.Set("Stock", 1)), "Stock", false},
		{"Add", items.Update(ctx, pool, 1, 5, postgres.Add("stokc", 1)), "stokc", false},
		{"Expr", items.Update(ctx, pool, 1, 5, postgres.Set("stock", postgres.Expr("Stokc + $1", 1))), "stokc", false},
		{"Where", items.Update(ctx, pool, 1, 5, postgres.Add("stock", 1), postgres.Where("items.stokc > 0")), "stokc", false},
		{"Read", items.Read(ctx, pool, 1, 5, []string{"stock", "nope"}, &stock, &stock), "nope", false},
		{"Upsert", items.Upsert(ctx, pool, 2, 5, postgres.Set("stokc", 1)), "stokc", false},
		{"no token column", nofence.Update(ctx, pool, 1, 5, postgres.Set("stock", 1)), "fence_token", true},
		{"no token column, Delete", nofence.Delete(ctx, pool, 1, 5), "fence_token", true},
		{"no key column", wrongKey.Update(ctx, pool, "x", 5, postgres.Add("stock", 1)), "sku", true},
	} {
		var ce *postgres.ColumnError
		if !errors.As(c.err, &ce) || !errors.Is(c.err, postgres.ErrSchema) || ce.Column != c.column || ce.Table == "" {
			t.Errorf("%s: %v, want a ColumnError naming %q", c.name, c.err, c.column)
			continue
		}
		if se := new(postgres.SchemaError); errors.As(c.err, &se) != c.schema {
			t.Errorf("%s: %v: SchemaError %v, want %v", c.name, c.err, !c.schema, c.schema)
		}
		t.Logf("%s: %v", c.name, c.err)
	}
	if stock, mark := row(t, pool, 1); stock != 10 || mark != 0 {
		t.Fatalf("row = stock %d mark %d after failed statements, want 10 and 0", stock, mark)
	}
}

// A fragment is checked on every call, not only when its statement is
// built: a fragment that spells another Update's statement key (its parts
// and the NULs between them) is refused, not run as the cached statement
// with a condition the caller never wrote.
func TestUpdateExprFragmentCheckedBeforeCache(t *testing.T) {
	t.Parallel()
	pool, items := setup(t)
	ctx := ctxFor(t, time.Minute)
	exec(t, pool, `UPDATE items SET stock = 200, fence_token = 5 WHERE id = 1`)
	// Valid Updates put their statements in the Table's cache.
	if err := items.Update(ctx, pool, 1, 5, postgres.Set("stock", postgres.Expr("stock - 1")), postgres.Where("stock > 100")); err != nil {
		t.Fatal(err)
	}
	if err := items.Update(ctx, pool, 1, 5, postgres.Set("stock", postgres.Expr("stock - 1")), postgres.Where("stock > 100"), postgres.Where("stock > 0")); err != nil {
		t.Fatal(err)
	}
	before := dump(t, pool, "items", "fence_tokens")
	for _, c := range []struct {
		name string
		set  []postgres.Clause
	}{
		{"Expr spelling Expr and Where", []postgres.Clause{postgres.Set("stock", postgres.Expr("stock - 1\x000\x003\x00stock > 100"))}},
		{"Where spelling two Wheres", []postgres.Clause{postgres.Set("stock", postgres.Expr("stock - 1")), postgres.Where("stock > 100\x000\x003\x00stock > 0")}},
	} {
		err := items.Update(ctx, pool, 1, 6, c.set...)
		if !errors.Is(err, postgres.ErrBadInput) || !strings.Contains(err.Error(), "NUL") {
			t.Errorf("%s: %v, want ErrBadInput for the NUL byte", c.name, err)
		}
		if after := dump(t, pool, "items", "fence_tokens"); after != before {
			t.Errorf("%s moved a mark or a value:\n%s\nthen\n%s", c.name, before, after)
		}
	}
}
