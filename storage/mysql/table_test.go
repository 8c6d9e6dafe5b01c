package mysql_test

import (
	"database/sql"
	"errors"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/storage/mysql"
	"github.com/fenceguard/fenceguard/token"
)

// newItems returns a database with items(id, stock, note, fence_token)
// holding row 1 (stock 10, mark 0), and the Table over it, unchecked.
func newItems(t *testing.T, params ...string) (*sql.DB, *mysql.Table) {
	t.Helper()
	db := newDB(t, params...)
	exec(t, db, `CREATE TABLE items (id BIGINT PRIMARY KEY, stock INT NOT NULL, note VARCHAR(50),
 fence_token BIGINT UNSIGNED NOT NULL DEFAULT 0) ENGINE=InnoDB`,
		`INSERT INTO items (id, stock) VALUES (1, 10)`)
	items, err := mysql.NewTable(mysql.TableOptions{Name: []string{"items"}, Key: "id", Check: token.NoCheck()})
	if err != nil {
		t.Fatal(err)
	}
	return db, items
}

// row reads row 1's stock, note and mark.
func row(t *testing.T, db *sql.DB) (stock int, note sql.NullString, mark uint64) {
	t.Helper()
	if err := db.QueryRow(`SELECT stock, note, fence_token FROM items WHERE id = 1`).Scan(&stock, &note, &mark); err != nil {
		t.Fatal(err)
	}
	return stock, note, mark
}

// Update tells its four outcomes apart — done, stale, no such row, a
// condition not true — with and without the driver options that change
// what the server reports (clientFoundRows) and how arguments travel
// (interpolateParams), under REPEATABLE READ and READ COMMITTED.
func TestTableUpdateOutcomes(t *testing.T) {
	for _, params := range [][]string{nil, {"clientFoundRows", "true"}, {"interpolateParams", "true"}, {"isolation", "READ-COMMITTED"}} {
		name := "default"
		if params != nil {
			name = params[0] + "=" + params[1]
		}
		t.Run(name, func(t *testing.T) {
			db, items := newItems(t, params...)
			ctx := ctxFor(t, time.Minute)
			check := func(stock int, note string, mark uint64) {
				t.Helper()
				s, n, m := row(t, db)
				if s != stock || n.String != note || m != mark {
					t.Fatalf("row: stock %d, note %q, mark %d; want %d, %q, %d", s, n.String, m, stock, note, mark)
				}
			}
			if err := items.Update(ctx, db, 1, 5, mysql.Add("stock", -1), mysql.Set("note", "five")); err != nil {
				t.Fatal(err)
			}
			check(9, "five", 5)
			// The same holder again with the same values: the row is
			// unchanged, which counts 0 affected rows without
			// clientFoundRows; the outcome does not come from that count.
			if err := items.Update(ctx, db, 1, 5, mysql.Set("note", "five")); err != nil {
				t.Fatalf("equal token, unchanged row: %v", err)
			}
			check(9, "five", 5)
			stale(t, items.Update(ctx, db, 1, 4, mysql.Add("stock", -1)), 4, 5)
			check(9, "five", 5)
			// Stale whatever the condition.
			stale(t, items.Update(ctx, db, 1, 4, mysql.Add("stock", -1), mysql.Where("stock > ?", 100)), 4, 5)
			if err := items.Update(ctx, db, 2, 9, mysql.Add("stock", -1)); !errors.Is(err, mysql.ErrNoRow) || !errors.Is(err, token.ErrNotFound) {
				t.Fatalf("Update of a missing row = %v, want ErrNoRow", err)
			}
			// A condition not true: nothing assigned, the row claimed.
			err := items.Update(ctx, db, 1, 7, mysql.Add("stock", -1), mysql.Where("stock > ?", 100))
			var ce *mysql.ConditionError
			if !errors.As(err, &ce) || !errors.Is(err, token.ErrCondition) || ce.Token != 7 || ce.Resource != "items/1" {
				t.Fatalf("Update with a false condition = %v, want a ConditionError for token 7", err)
			}
			check(9, "five", 7)
			// A NULL condition is not true either.
			if err := items.Update(ctx, db, 1, 7, mysql.Set("note", "x"), mysql.Where("note > NULL")); !errors.Is(err, mysql.ErrCondition) {
				t.Fatalf("Update with a NULL condition = %v, want ErrCondition", err)
			}
			check(9, "five", 7)
			// Conditions see the row as it was: stock = 9 before the
			// decrement, 8 after.
			if err := items.Update(ctx, db, 1, 8, mysql.Add("stock", -1), mysql.Where("stock = ?", 9), mysql.Where("note = ?", "five")); err != nil {
				t.Fatal(err)
			}
			check(8, "five", 8)
			// No assignment: a claim only.
			if err := items.Update(ctx, db, 1, 9); err != nil {
				t.Fatal(err)
			}
			check(8, "five", 9)
			// The whole uint64 range.
			if err := items.Update(ctx, db, 1, math.MaxUint64, mysql.Set("note", "top")); err != nil {
				t.Fatal(err)
			}
			check(8, "top", math.MaxUint64)
			stale(t, items.Update(ctx, db, 1, math.MaxUint64-1, mysql.Set("note", "below")), math.MaxUint64-1, math.MaxUint64)
			check(8, "top", math.MaxUint64)
		})
	}
}

// Fencing only the writes does not stop a read-modify-write race: A
// (token 5) reads stock 10 and pauses, B (6) reads 10 and writes 9, A
// wakes and writes 9 — two sales, one decrement. Claiming on the read
// too (Read) refuses A's write.
func TestTableReadModifyWrite(t *testing.T) {
	db, items := newItems(t)
	ctx := ctxFor(t, time.Minute)
	read := func(tok token.Token) int {
		var s int
		if err := items.Read(ctx, db, 1, tok, []string{"stock"}, &s); err != nil {
			t.Fatalf("Read with %d: %v", tok, err)
		}
		return s
	}
	a := read(5)
	b := read(6)
	if err := items.Update(ctx, db, 1, 6, mysql.Set("stock", b-1)); err != nil {
		t.Fatal(err)
	}
	stale(t, items.Update(ctx, db, 1, 5, mysql.Set("stock", a-1)), 5, 6)
	if s, _, _ := row(t, db); s != 9 {
		t.Fatalf("stock %d after one sale, want 9", s)
	}
}

// 16 goroutines decrement one row with random tokens: the accepted writes,
// replayed in token order, give the final state, and the mark ends at the
// largest token accepted.
func TestTableConcurrentUpdates(t *testing.T) {
	db, items := newItems(t)
	exec(t, db, `UPDATE items SET stock = 100000 WHERE id = 1`)
	ctx := ctxFor(t, 2*time.Minute)
	const workers, perWorker = 16, 30
	var (
		mu       sync.Mutex
		accepted []token.Token
		wg       sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for range perWorker {
				tok := token.Token(1 + rand.N(2000))
				err := items.Update(ctx, db, 1, tok, mysql.Add("stock", -1))
				var se *token.StaleError
				switch {
				case err == nil:
					mu.Lock()
					accepted = append(accepted, tok)
					mu.Unlock()
				case errors.As(err, &se):
					if se.Current <= tok {
						t.Errorf("Update(%d): StaleError %+v", tok, se)
					}
				default:
					t.Errorf("Update(%d): %v", tok, err)
				}
			}
		})
	}
	wg.Wait()
	sort.Slice(accepted, func(i, j int) bool { return accepted[i] < accepted[j] })
	stock, _, mark := row(t, db)
	if len(accepted) == 0 || stock != 100000-len(accepted) || mark != uint64(accepted[len(accepted)-1]) {
		t.Fatalf("stock %d, mark %d; want %d (one per accepted write) and %d (the largest accepted)",
			stock, mark, 100000-len(accepted), accepted[len(accepted)-1])
	}
}

// Input no update could succeed with is refused before anything is sent,
// and a table without the token column is a SchemaError.
func TestTableBadInput(t *testing.T) {
	db, items := newItems(t)
	ctx := ctxFor(t, time.Minute)
	for name, set := range map[string][]mysql.Clause{
		"semicolon":          {mysql.Add("stock", -1), mysql.Where("stock > 0; DELETE FROM items")},
		"closes a paren":     {mysql.Add("stock", -1), mysql.Where("stock > 0) OR (1")},
		"open quote":         {mysql.Where("note = 'x")},
		"comment":            {mysql.Where("stock > 0 -- ")},
		"hash comment":       {mysql.Where("stock > 0 # ")},
		"block comment":      {mysql.Where("stock > 0 /* */")},
		"too few args":       {mysql.Where("stock > ?")},
		"too many args":      {mysql.Where("stock > 0", 1)},
		"the token column":   {mysql.Set("fence_token", 1)},
		"the key column":     {mysql.Set("id", 2)},
		"an unquotable name": {mysql.Set("", 2)},
		"an empty condition": {mysql.Where(" ")},
	} {
		if err := items.Update(ctx, db, 1, 5, set...); !errors.Is(err, mysql.ErrBadInput) {
			t.Errorf("%s: %v, want ErrBadInput", name, err)
		}
	}
	// A ? inside a string is text, not a placeholder.
	if err := items.Update(ctx, db, 1, 5, mysql.Set("note", "q"), mysql.Where("COALESCE(note, '?') = '?'")); err != nil {
		t.Errorf("a quoted ?: %v", err)
	}
	if err := items.Update(ctx, nil, 1, 5); !errors.Is(err, mysql.ErrBadInput) {
		t.Errorf("nil DB: %v, want ErrBadInput", err)
	}
	if err := items.Update(ctx, db, nil, 5); !errors.Is(err, mysql.ErrBadInput) {
		t.Errorf("nil key: %v, want ErrBadInput", err)
	}
	if _, err := mysql.NewTable(mysql.TableOptions{Name: []string{"items"}, Key: "id", Token: "ID"}); !errors.Is(err, mysql.ErrBadInput) {
		t.Errorf("key and token column the same: %v, want ErrBadInput", err)
	}
	exec(t, db, `CREATE TABLE plain (id BIGINT PRIMARY KEY, stock INT)`, `INSERT INTO plain VALUES (1, 1)`)
	plain, _ := mysql.NewTable(mysql.TableOptions{Name: []string{"plain"}, Key: "id", Check: token.NoCheck()})
	if err := plain.Update(ctx, db, 1, 5, mysql.Add("stock", -1)); !errors.Is(err, mysql.ErrSchema) {
		t.Errorf("a table without the token column: %v, want ErrSchema", err)
	}
	if s, _, m := row(t, db); m != 5 || s != 10 {
		t.Errorf("after the refusals: stock %d, mark %d; want 10, 5", s, m)
	}
}

// Read claims the row, then reads it; a refused or missing row leaves the
// destinations alone.
func TestTableRead(t *testing.T) {
	db, items := newItems(t)
	ctx := ctxFor(t, time.Minute)
	stock, note := -1, sql.NullString{String: "untouched"}
	if err := items.Read(ctx, db, 1, 5, []string{"stock", "note"}, &stock, &note); err != nil {
		t.Fatal(err)
	}
	if _, _, m := row(t, db); stock != 10 || note.Valid || m != 5 {
		t.Fatalf("Read: stock %d, note %+v, mark %d; want 10, NULL, 5", stock, note, m)
	}
	stock = -1
	stale(t, items.Read(ctx, db, 1, 4, []string{"stock"}, &stock), 4, 5)
	if err := items.Read(ctx, db, 2, 9, []string{"stock"}, &stock); !errors.Is(err, mysql.ErrNoRow) {
		t.Fatalf("Read of a missing row = %v, want ErrNoRow", err)
	}
	if stock != -1 {
		t.Fatalf("a refused Read wrote %d", stock)
	}
	if err := items.Read(ctx, db, 1, 5, []string{"stock", "note"}, &stock); !errors.Is(err, mysql.ErrBadInput) {
		t.Errorf("two columns, one destination: %v, want ErrBadInput", err)
	}
	if err := items.Read(ctx, db, 1, 5, []string{"nope"}, &stock); !errors.Is(err, mysql.ErrSchema) {
		t.Errorf("an unknown column: %v, want ErrSchema", err)
	}
	// In the caller's transaction the claim's lock holds until it ends,
	// and a rollback undoes the claim.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := items.Read(ctx, tx, 1, 8, []string{"stock"}, &stock); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, _, m := row(t, db); m != 5 {
		t.Fatalf("after a rolled-back Read: mark %d, want 5", m)
	}
}

// A token column that cannot hold every token is refused as a schema
// error before anything is written: outside strict sql_mode the server
// would store a token above its range clipped (2^63+1000 in a signed
// BIGINT as 2^63-1), and a lower token would pass the clipped mark.
func TestTableTokenColumnNotBigintUnsigned(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	db := newDB(t, "sql_mode", "")
	if err := mysql.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	hi, lo := token.Token(1<<63+1000), token.Token(1<<63+1)
	for _, typ := range []string{"BIGINT", "INT UNSIGNED", "DOUBLE", "DECIMAL(30,0)", "VARCHAR(30)"} {
		exec(t, db, "DROP TABLE IF EXISTS g",
			"CREATE TABLE g (id BIGINT PRIMARY KEY, note TEXT, fence_token "+typ+" NOT NULL DEFAULT 0)",
			"INSERT INTO g (id) VALUES (1)")
		g, err := mysql.NewTable(mysql.TableOptions{Name: []string{"g"}, Key: "id", Check: token.NoCheck()})
		if err != nil {
			t.Fatal(err)
		}
		var note string
		for _, tok := range []token.Token{hi, lo} {
			if err := g.Update(ctx, db, 1, tok, mysql.Set("note", "x")); !errors.Is(err, mysql.ErrSchema) {
				t.Errorf("%s: update at %d: %v, want ErrSchema", typ, tok, err)
			}
			if err := g.Read(ctx, db, 1, tok, []string{"id"}, new(int)); !errors.Is(err, mysql.ErrSchema) {
				t.Errorf("%s: read at %d: %v, want ErrSchema", typ, tok, err)
			}
			if err := g.Update(ctx, db, 1, tok, mysql.Set("note", "x"), mysql.Returning("note", &note)); !errors.Is(err, mysql.ErrSchema) {
				t.Errorf("%s: update returning at %d: %v, want ErrSchema", typ, tok, err)
			}
			if err := g.Upsert(ctx, db, 2, tok, mysql.Set("note", "x")); !errors.Is(err, mysql.ErrSchema) {
				t.Errorf("%s: upsert at %d: %v, want ErrSchema", typ, tok, err)
			}
		}
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM g WHERE fence_token <> 0 OR note IS NOT NULL OR id <> 1").Scan(&n); err != nil || n != 0 {
			t.Errorf("%s: %d rows written by refused calls (%v)", typ, n, err)
		}
	}
}

// A key of another kind than a string key column is refused: the server
// would compare the column's text as a number, and one Update would
// write every row that reads as that number ("42", " 42", "042").
func TestTableNumberKeyForAStringColumn(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	db := newDB(t)
	exec(t, db, "CREATE TABLE s (id VARCHAR(20) PRIMARY KEY, note TEXT, fence_token BIGINT UNSIGNED NOT NULL DEFAULT 0)",
		"INSERT INTO s (id, fence_token) VALUES ('42', 5), ('42.0', 10), (' 42', 5), ('042', 5)")
	s, err := mysql.NewTable(mysql.TableOptions{Name: []string{"s"}, Key: "id", Check: token.NoCheck()})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []any{42, int64(42), uint8(42), 42.0, true} {
		if err := s.Update(ctx, db, key, 7, mysql.Set("note", "x")); !errors.Is(err, mysql.ErrBadInput) {
			t.Errorf("update of key %#v: %v, want ErrBadInput", key, err)
		}
		if err := s.Read(ctx, db, key, 7, []string{"id"}, new(string)); !errors.Is(err, mysql.ErrBadInput) {
			t.Errorf("read of key %#v: %v, want ErrBadInput", key, err)
		}
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM s WHERE note IS NOT NULL OR fence_token = 7").Scan(&n); err != nil || n != 0 {
		t.Errorf("%d rows written by refused updates (%v)", n, err)
	}
	if err := s.Update(ctx, db, "42", 7, mysql.Set("note", "x")); err != nil {
		t.Errorf("update of key \"42\": %v", err)
	}
	if err := s.Update(ctx, db, []byte("042"), 7, mysql.Set("note", "x")); err != nil {
		t.Errorf("update of key []byte(\"042\"): %v", err)
	}
	if err := db.QueryRow("SELECT COUNT(*) FROM s WHERE note IS NOT NULL").Scan(&n); err != nil || n != 2 {
		t.Errorf("%d rows written by two updates (%v), want 2", n, err)
	}
}
