package mysql_test

import (
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/storage/mysql"
	"github.com/fenceguard/fenceguard/token"
)

// newMigratedItems is newItems with the high-water table, which keeps
// the tombstones of Delete and the claims of Upsert's insert path.
func newMigratedItems(t *testing.T, params ...string) (*sql.DB, *mysql.Table) {
	t.Helper()
	db, items := newItems(t, params...)
	if err := mysql.Migrate(ctxFor(t, time.Minute), db); err != nil {
		t.Fatal(err)
	}
	return db, items
}

// rowOf reads a row's note and mark; ok is false when there is no row.
func rowOf(t *testing.T, db *sql.DB, id int) (note string, mark uint64, ok bool) {
	t.Helper()
	var n sql.NullString
	err := db.QueryRow(`SELECT note, fence_token FROM items WHERE id = ?`, id).Scan(&n, &mark)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return n.String, mark, true
}

// Upsert inserts a missing row under the token, updates an existing one
// under the check, and refuses a stale token either way, writing nothing.
func TestTableUpsert(t *testing.T) {
	for _, params := range [][]string{nil, {"clientFoundRows", "true"}, {"isolation", "READ-COMMITTED"}} {
		name := "default"
		if params != nil {
			name = params[0] + "=" + params[1]
		}
		t.Run(name, func(t *testing.T) {
			db, items := newMigratedItems(t, params...)
			ctx := ctxFor(t, time.Minute)
			want := func(id int, note string, mark uint64) {
				t.Helper()
				n, m, ok := rowOf(t, db, id)
				if !ok || n != note || m != mark {
					t.Fatalf("row %d: note %q, mark %d, exists %v; want %q, %d", id, n, m, ok, note, mark)
				}
			}
			// Insert: stock has no default, so the insert sets it.
			if err := items.Upsert(ctx, db, 2, 5, mysql.Set("stock", 3), mysql.Set("note", "new")); err != nil {
				t.Fatal(err)
			}
			want(2, "new", 5)
			// Update, the same holder and a newer one.
			if err := items.Upsert(ctx, db, 2, 5, mysql.Set("note", "again")); err != nil {
				t.Fatal(err)
			}
			want(2, "again", 5)
			if err := items.Upsert(ctx, db, 2, 6, mysql.Set("note", "six")); err != nil {
				t.Fatal(err)
			}
			want(2, "six", 6)
			stale(t, items.Upsert(ctx, db, 2, 4, mysql.Set("note", "stale")), 4, 6)
			want(2, "six", 6)
			// An existing row with mark 0: an update.
			if err := items.Upsert(ctx, db, 1, 1, mysql.Set("note", "one")); err != nil {
				t.Fatal(err)
			}
			want(1, "one", 1)
			// No assignment: inserts the key with its defaults... which
			// stock has none of, so the server refuses and nothing stays.
			if err := items.Upsert(ctx, db, 3, 9); err == nil || errors.Is(err, token.ErrStale) {
				t.Fatalf("Upsert leaving a NOT NULL column without default = %v, want the server's error", err)
			}
			if _, _, ok := rowOf(t, db, 3); ok {
				t.Fatal("a failed insert left a row")
			}
			if hw, err := items.HighWater(ctx, db, 3); !errors.Is(err, mysql.ErrNoRow) {
				t.Fatalf("a failed insert left a tombstone claim: HighWater %d, %v", hw, err)
			}
		})
	}
}

// Input no upsert could succeed with is refused before anything is sent:
// no row, no tombstone claim, no mark moved.
func TestTableUpsertBadInput(t *testing.T) {
	db, items := newMigratedItems(t)
	ctx := ctxFor(t, time.Minute)
	for name, set := range map[string][]mysql.Clause{
		"add":              {mysql.Set("stock", 1), mysql.Add("stock", -1)},
		"where":            {mysql.Set("stock", 1), mysql.Where("stock > 0")},
		"the token column": {mysql.Set("stock", 1), mysql.Set("fence_token", 1)},
		"the key column":   {mysql.Set("stock", 1), mysql.Set("id", 7)},
		"twice":            {mysql.Set("stock", 1), mysql.Set("STOCK", 2)},
		"an empty name":    {mysql.Set("", 1)},
	} {
		for _, id := range []int{1, 2} {
			if err := items.Upsert(ctx, db, id, 5, set...); !errors.Is(err, mysql.ErrBadInput) {
				t.Errorf("%s, row %d: %v, want ErrBadInput", name, id, err)
			}
		}
	}
	if err := items.Upsert(ctx, db, "2", 5, mysql.Set("stock", 1)); !errors.Is(err, mysql.ErrBadInput) {
		t.Errorf("a string key for an integer column: %v, want ErrBadInput", err)
	}
	if err := items.Upsert(ctx, nil, 2, 5); !errors.Is(err, mysql.ErrBadInput) {
		t.Errorf("nil DB: %v, want ErrBadInput", err)
	}
	if _, m, _ := rowOf(t, db, 1); m != 0 {
		t.Errorf("row 1's mark %d after refusals, want 0", m)
	}
	if _, _, ok := rowOf(t, db, 2); ok {
		t.Error("a refused Upsert inserted row 2")
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM fence_tokens`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d tombstones after refusals (%v), want 0", n, err)
	}
}

// 16 goroutines upsert and delete one row with distinct random tokens:
// the final state is the accepted operation with the largest token (the
// row with its note, or no row), whatever order the server saw them in,
// and no deadlock reaches the caller.
func TestTableConcurrentUpsertDelete(t *testing.T) {
	for _, params := range [][]string{nil, {"isolation", "READ-COMMITTED"}} {
		name := "default"
		if params != nil {
			name = params[0] + "=" + params[1]
		}
		t.Run(name, func(t *testing.T) {
			db, items := newMigratedItems(t, params...)
			ctx := ctxFor(t, 2*time.Minute)
			const workers, perWorker = 16, 20
			type op struct {
				tok    token.Token
				delete bool
			}
			ops := make(chan op, workers*perWorker)
			errs := make(chan error, workers*perWorker)
			done := make(chan struct{})
			for w := range workers {
				go func() {
					defer func() { done <- struct{}{} }()
					for i := range perWorker {
						// Distinct tokens: worker w draws from its own
						// residue class.
						tok := token.Token(rand.N[uint64](1000)*workers + uint64(w) + 1)
						del := i%3 == 2
						var err error
						if del {
							err = items.Delete(ctx, db, 7, tok)
						} else {
							err = items.Upsert(ctx, db, 7, tok, mysql.Set("stock", 1), mysql.Set("note", fmt.Sprint(tok)))
						}
						var se *token.StaleError
						switch {
						case err == nil:
							ops <- op{tok, del}
						case errors.As(err, &se):
							if se.Current <= tok {
								errs <- fmt.Errorf("token %d: StaleError %+v", tok, se)
							}
						case del && errors.Is(err, mysql.ErrNoRow):
						default:
							errs <- fmt.Errorf("token %d (delete %v): %v", tok, del, err)
						}
					}
				}()
			}
			for range workers {
				<-done
			}
			close(ops)
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			var last op
			n := 0
			for o := range ops {
				n++
				if o.tok > last.tok {
					last = o
				}
			}
			note, mark, ok := rowOf(t, db, 7)
			switch {
			case n == 0:
				t.Fatal("nothing accepted")
			case last.delete && ok:
				t.Fatalf("the last accepted operation (token %d) deleted, yet the row is there (note %s, mark %d)", last.tok, note, mark)
			case !last.delete && (!ok || note != fmt.Sprint(last.tok) || mark != uint64(last.tok)):
				t.Fatalf("the last accepted operation upserted %d; row: %q, mark %d, exists %v", last.tok, note, mark, ok)
			}
			if hw, err := items.HighWater(ctx, db, 7); err != nil || hw != last.tok {
				t.Fatalf("HighWater %d, %v; want %d", hw, err, last.tok)
			}
			t.Logf("%d operations accepted", n)
		})
	}
}

// Outside strict mode the server stores a key its column cannot hold
// altered (cut short, clipped) with a warning. Upsert's insert path must
// not create the row under that other key, named by a tombstone of the
// key as given: a row deleted at 10 would come back at 6.
func TestTableUpsertKeyTheColumnCannotHold(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	db := newDB(t, "sql_mode", "")
	if err := mysql.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	exec(t, db,
		"CREATE TABLE tiny (id TINYINT PRIMARY KEY, note TEXT, fence_token BIGINT UNSIGNED NOT NULL DEFAULT 0)",
		"CREATE TABLE short (id VARBINARY(8) PRIMARY KEY, note TEXT, fence_token BIGINT UNSIGNED NOT NULL DEFAULT 0)")
	for _, c := range []struct {
		table       string
		stored, bad any // bad is stored as stored
	}{
		{"tiny", 127, 300},
		{"tiny", -128, -300},
		{"short", "abcdefgh", "abcdefghX"},
	} {
		tb, err := mysql.NewTable(mysql.TableOptions{Name: []string{c.table}, Key: "id"})
		if err != nil {
			t.Fatal(err)
		}
		exec(t, db, "INSERT INTO "+c.table+" (id, fence_token) VALUES ('"+fmt.Sprint(c.stored)+"', 5)")
		if err := tb.Delete(ctx, db, c.stored, 10); err != nil {
			t.Fatalf("%s: delete %v: %v", c.table, c.stored, err)
		}
		if err := tb.Upsert(ctx, db, c.bad, 6, mysql.Set("note", "stale")); !errors.Is(err, mysql.ErrBadInput) {
			t.Errorf("%s: upsert %v at 6, stored as %v deleted at 10: %v, want ErrBadInput", c.table, c.bad, c.stored, err)
		}
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM " + c.table).Scan(&n); err != nil || n != 0 {
			t.Errorf("%s: %d rows after the refused upsert of %v (%v), want 0", c.table, n, c.bad, err)
		}
		if err := db.QueryRow("SELECT COUNT(*) FROM fence_tokens WHERE resource = ?", c.table+"/"+fmt.Sprint(c.bad)).Scan(&n); err != nil || n != 0 {
			t.Errorf("%s: the refused upsert of %v left a tombstone (%v)", c.table, c.bad, err)
		}
	}
}
