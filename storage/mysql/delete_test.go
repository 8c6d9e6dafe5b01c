package mysql_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/storage/mysql"
	"github.com/fenceguard/fenceguard/token"
)

// A deleted row's mark survives it as a tombstone: a holder older than
// the deleting one can neither delete again nor re-create the row; a
// newer one can.
func TestTableDeleteTombstone(t *testing.T) {
	for _, params := range [][]string{nil, {"isolation", "READ-COMMITTED"}} {
		name := "default"
		if params != nil {
			name = params[0] + "=" + params[1]
		}
		t.Run(name, func(t *testing.T) {
			db, items := newMigratedItems(t, params...)
			ctx := ctxFor(t, time.Minute)
			if err := items.Update(ctx, db, 1, 5, mysql.Set("note", "five")); err != nil {
				t.Fatal(err)
			}
			stale(t, items.Delete(ctx, db, 1, 4), 4, 5)
			if _, m, ok := rowOf(t, db, 1); !ok || m != 5 {
				t.Fatalf("a stale Delete: row exists %v, mark %d; want the row, mark 5", ok, m)
			}
			if hw, err := items.HighWater(ctx, db, 1); err != nil || hw != 5 {
				t.Fatalf("HighWater %d, %v; want 5", hw, err)
			}
			if err := items.Delete(ctx, db, 1, 7); err != nil {
				t.Fatal(err)
			}
			if _, _, ok := rowOf(t, db, 1); ok {
				t.Fatal("Delete left the row")
			}
			if hw, err := items.HighWater(ctx, db, 1); err != nil || hw != 7 {
				t.Fatalf("HighWater of a deleted row %d, %v; want its tombstone, 7", hw, err)
			}
			// The holder of 6, between the mark and the deleting token,
			// would have been accepted by the row: the tombstone refuses it.
			stale(t, items.Upsert(ctx, db, 1, 6, mysql.Set("stock", 1), mysql.Set("note", "zombie")), 6, 7)
			if _, _, ok := rowOf(t, db, 1); ok {
				t.Fatal("a stale Upsert re-created the deleted row")
			}
			if err := items.Delete(ctx, db, 1, 7); !errors.Is(err, mysql.ErrNoRow) || !errors.Is(err, token.ErrNotFound) {
				t.Fatalf("Delete of a deleted row = %v, want ErrNoRow", err)
			}
			if err := items.Upsert(ctx, db, 1, 7, mysql.Set("stock", 2), mysql.Set("note", "back")); err != nil {
				t.Fatal(err)
			}
			if n, m, ok := rowOf(t, db, 1); !ok || n != "back" || m != 7 {
				t.Fatalf("re-created row: note %q, mark %d, exists %v; want back, 7", n, m, ok)
			}
			// A missing row is ErrNoRow and leaves no tombstone.
			if err := items.Delete(ctx, db, 9, 100); !errors.Is(err, mysql.ErrNoRow) {
				t.Fatalf("Delete of a missing row = %v, want ErrNoRow", err)
			}
			if hw, err := items.HighWater(ctx, db, 9); !errors.Is(err, mysql.ErrNoRow) {
				t.Fatalf("HighWater of a key never written = %d, %v; want ErrNoRow", hw, err)
			}
			if err := items.Upsert(ctx, db, 9, 1, mysql.Set("stock", 1)); err != nil {
				t.Fatalf("Upsert after a Delete of a missing row: %v", err)
			}
		})
	}
}

// In the caller's transaction, a rolled-back Delete takes its tombstone
// with it, and a committed one keeps both halves.
func TestTableDeleteInTx(t *testing.T) {
	db, items := newMigratedItems(t)
	ctx := ctxFor(t, time.Minute)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := items.Delete(ctx, tx, 1, 5); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, m, ok := rowOf(t, db, 1); !ok || m != 0 {
		t.Fatalf("after a rolled-back Delete: exists %v, mark %d; want the row, 0", ok, m)
	}
	if hw, err := items.HighWater(ctx, db, 1); err != nil || hw != 0 {
		t.Fatalf("after a rolled-back Delete: HighWater %d, %v; want 0 (no tombstone)", hw, err)
	}
	// A refusal inside the caller's transaction leaves nothing of the
	// Delete behind, and the transaction goes on.
	if err := items.Update(ctx, db, 1, 5); err != nil {
		t.Fatal(err)
	}
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	stale(t, items.Delete(ctx, tx, 1, 3), 3, 5)
	if err := items.Delete(ctx, tx, 2, 6); !errors.Is(err, mysql.ErrNoRow) {
		t.Fatalf("Delete of a missing row = %v, want ErrNoRow", err)
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM fence_tokens`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d tombstones after refused Deletes (%v), want 0", n, err)
	}
	if err := items.Delete(ctx, tx, 1, 5); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if hw, err := items.HighWater(ctx, db, 1); err != nil || hw != 5 {
		t.Fatalf("after a committed Delete: HighWater %d, %v; want 5", hw, err)
	}
}

// Tombstones name keys by text, so Delete and Upsert's insert path take
// only key columns whose text names each key once; others are a
// SchemaError and nothing is written. Updates of existing rows work with
// every key column.
func TestTableTombstoneKeyTypes(t *testing.T) {
	db := newDB(t)
	ctx := ctxFor(t, time.Minute)
	if err := mysql.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		name, typ     string
		key, spelling any // spelling: the same row in another spelling, nil if none
		fit           bool
	}{
		{"ci", "VARCHAR(20) COLLATE utf8mb4_general_ci", "alice", "ALICE", false},
		{"pad space bin", "VARCHAR(20) COLLATE utf8mb4_bin", "alice", "alice ", false},
		{"decimal", "DECIMAL(10,2)", "1.5", "1.50", false},
		{"nopad bin", "VARCHAR(20) COLLATE utf8mb4_nopad_bin", "alice", nil, true},
		{"varbinary", "VARBINARY(20)", []byte("alice"), nil, true},
		{"unsigned", "BIGINT UNSIGNED", uint64(1) << 63, nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			tbl := fmt.Sprintf("keys%d", i)
			exec(t, db, "CREATE TABLE "+tbl+" (k "+c.typ+" PRIMARY KEY, v INT, fence_token BIGINT UNSIGNED NOT NULL DEFAULT 0)")
			if _, err := db.Exec("INSERT INTO "+tbl+" (k, v) VALUES (?, 1)", c.key); err != nil {
				t.Fatal(err)
			}
			tb, err := mysql.NewTable(mysql.TableOptions{Name: []string{tbl}, Key: "k", Check: token.NoCheck()})
			if err != nil {
				t.Fatal(err)
			}
			if err := tb.Upsert(ctx, db, c.key, 3, mysql.Set("v", 2)); err != nil {
				t.Fatalf("Upsert of an existing row: %v", err)
			}
			err = tb.Delete(ctx, db, c.key, 5)
			if !c.fit {
				var se *mysql.SchemaError
				if !errors.As(err, &se) || !errors.Is(tb.Verify(ctx, db), mysql.ErrSchema) {
					t.Fatalf("Delete = %v, want a SchemaError", err)
				}
				if err := tb.Upsert(ctx, db, c.spelling, 4, mysql.Set("v", 3)); err != nil {
					t.Fatalf("Upsert of the row in another spelling: %v", err) // an update: the same row
				}
				var n int
				if err := db.QueryRow("SELECT COUNT(*) FROM " + tbl).Scan(&n); err != nil || n != 1 {
					t.Fatalf("%d rows (%v), want the one row", n, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			stale(t, tb.Upsert(ctx, db, c.key, 4, mysql.Set("v", 3)), 4, 5)
			if err := tb.Upsert(ctx, db, c.key, 6, mysql.Set("v", 3)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// onlyStatements is a DB that can run statements but not begin a
// transaction.
type onlyStatements struct{ mysql.DB }

// Delete and Upsert's insert path need a transaction: a DB that cannot
// begin one (and is not a *sql.Tx) is refused, and nothing is written;
// a *sql.Conn can.
func TestTableDeleteNeedsTransaction(t *testing.T) {
	db, items := newMigratedItems(t)
	ctx := ctxFor(t, time.Minute)
	if err := items.Delete(ctx, onlyStatements{db}, 1, 5); !errors.Is(err, mysql.ErrBadInput) {
		t.Fatalf("Delete on a DB without BeginTx = %v, want ErrBadInput", err)
	}
	if err := items.Upsert(ctx, onlyStatements{db}, 2, 5, mysql.Set("stock", 1)); !errors.Is(err, mysql.ErrBadInput) {
		t.Fatalf("Upsert inserting on a DB without BeginTx = %v, want ErrBadInput", err)
	}
	// Updating an existing row needs none.
	if err := items.Upsert(ctx, onlyStatements{db}, 1, 5, mysql.Set("stock", 1)); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := rowOf(t, db, 2); ok {
		t.Fatal("a refused Upsert inserted row 2")
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := items.Delete(ctx, conn, 1, 5); err != nil {
		t.Fatal(err)
	}
	if hw, err := items.HighWater(ctx, conn, 1); err != nil || hw != 5 {
		t.Fatalf("HighWater %d, %v; want 5", hw, err)
	}
}

// HighWater is the row's mark, its tombstone's when the row is gone, and
// the row's alone when the key column cannot have tombstones.
func TestTableHighWater(t *testing.T) {
	db, items := newMigratedItems(t)
	ctx := ctxFor(t, time.Minute)
	if hw, err := items.HighWater(ctx, db, 1); err != nil || hw != 0 {
		t.Fatalf("a row never claimed: %d, %v; want 0", hw, err)
	}
	if _, err := items.HighWater(ctx, nil, 1); !errors.Is(err, mysql.ErrBadInput) {
		t.Fatalf("nil DB: %v, want ErrBadInput", err)
	}
	if _, err := items.HighWater(ctx, db, nil); !errors.Is(err, mysql.ErrBadInput) {
		t.Fatalf("nil key: %v, want ErrBadInput", err)
	}
	exec(t, db, `CREATE TABLE names (name VARCHAR(20) PRIMARY KEY, fence_token BIGINT UNSIGNED NOT NULL DEFAULT 0)`,
		`INSERT INTO names (name, fence_token) VALUES ('alice', 9)`)
	names, err := mysql.NewTable(mysql.TableOptions{Name: []string{"names"}, Key: "name", Check: token.NoCheck()})
	if err != nil {
		t.Fatal(err)
	}
	if hw, err := names.HighWater(ctx, db, "ALICE"); err != nil || hw != 9 {
		t.Fatalf("a case-insensitive key: %d, %v; want the row's 9", hw, err)
	}
	if _, err := names.HighWater(ctx, db, "bob"); !errors.Is(err, mysql.ErrNoRow) {
		t.Fatalf("a missing row without tombstones: %v, want ErrNoRow", err)
	}
}
