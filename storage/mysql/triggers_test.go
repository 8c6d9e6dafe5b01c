package mysql_test

import (
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/storage/mysql"
	"github.com/fenceguard/fenceguard/token"
)

// triggerBodies are row triggers of the kinds users put on tables: one
// that only sets a variable, one that writes an audit row with an
// AUTO_INCREMENT id (past the outcome codes), and one that updates
// another table.
var triggerBodies = map[string]string{
	"variable": "SET @fg_n = COALESCE(@fg_n, 0) + 1",
	"audit":    "INSERT INTO audit (note) VALUES ('x')",
	"counter":  "UPDATE counter SET n = n + 1 WHERE id = 1",
}

// addTriggers creates, on table, a BEFORE and an AFTER trigger for INSERT
// and UPDATE with body.
func addTriggers(t *testing.T, db *sql.DB, table, kind, body string) {
	t.Helper()
	for _, when := range []string{"BEFORE", "AFTER"} {
		for _, ev := range []string{"INSERT", "UPDATE"} {
			exec(t, db, fmt.Sprintf("CREATE TRIGGER %s_%s_%s_%s %s %s ON %s FOR EACH ROW %s",
				table, kind, when, ev, when, ev, table, body))
		}
	}
}

func triggerDB(t *testing.T) *sql.DB {
	t.Helper()
	db := newDB(t)
	exec(t, db, `CREATE TABLE audit (id BIGINT AUTO_INCREMENT PRIMARY KEY, note VARCHAR(10))`,
		`CREATE TABLE counter (id INT PRIMARY KEY, n INT NOT NULL)`,
		`INSERT INTO counter VALUES (1, 0)`)
	for range 20 {
		exec(t, db, `INSERT INTO audit (note) VALUES ('pad')`)
	}
	return db
}

// MySQL and MariaDB reset what reports a statement's LAST_INSERT_ID when
// a trigger runs. A trigger on the high-water table must not turn a
// refused claim into an accepted one: Fence.Claim, Tx and TxAll still
// refuse a stale token, run nothing and move no mark, and accept a first
// claim, an equal one and a higher one.
func TestClaimsUnderTriggersOnTheHighWaterTable(t *testing.T) {
	for kind, body := range triggerBodies {
		t.Run(kind, func(t *testing.T) {
			db := triggerDB(t)
			ctx := ctxFor(t, time.Minute)
			if err := mysql.Migrate(ctx, db); err != nil {
				t.Fatal(err)
			}
			addTriggers(t, db, "fence_tokens", kind, body)
			marks, _ := mysql.NewTokens(mysql.TokensOptions{Check: token.NoCheck()})
			f := marks.Fence(db)

			if err := f.Claim(ctx, "a", 50); err != nil {
				t.Fatalf("first claim: %v", err)
			}
			if err := f.Claim(ctx, "a", 50); err != nil {
				t.Fatalf("equal claim: %v", err)
			}
			stale(t, f.Claim(ctx, "a", 40), 40, 50)
			if err := f.Claim(ctx, "a", 60); err != nil {
				t.Fatalf("higher claim: %v", err)
			}

			ran := false
			err := marks.Tx(ctx, db, "a", 55, func(*sql.Tx) error { ran = true; return nil })
			stale(t, err, 55, 60)
			if ran {
				t.Fatal("Tx ran fn for a stale token")
			}
			if err := marks.Tx(ctx, db, "b", 7, func(*sql.Tx) error { ran = true; return nil }); err != nil || !ran {
				t.Fatalf("Tx, first claim of b: %v (fn ran: %v)", err, ran)
			}
			ran = false
			err = marks.TxAll(ctx, db, map[string]token.Token{"a": 70, "b": 6}, func(*sql.Tx) error { ran = true; return nil })
			if !errors.Is(err, token.ErrStale) || ran {
				t.Fatalf("TxAll with b stale: %v (fn ran: %v), want stale and fn not run", err, ran)
			}
			for r, want := range map[string]token.Token{"a": 60, "b": 7} {
				if got, err := marks.HighWater(ctx, db, r); err != nil || got != want {
					t.Fatalf("mark of %s: %d, %v; want %d", r, got, err, want)
				}
			}
		})
	}
}

// Column mode cannot learn its statement's outcome on a table with
// triggers: Update and Upsert say so with ErrTriggers, never with a
// success, a refusal or ErrNoRow they cannot know. Table mode guards
// the same table.
func TestColumnModeOnATableWithTriggersIsErrTriggers(t *testing.T) {
	for kind, body := range triggerBodies {
		t.Run(kind, func(t *testing.T) {
			db := triggerDB(t)
			ctx := ctxFor(t, time.Minute)
			if err := mysql.Migrate(ctx, db); err != nil {
				t.Fatal(err)
			}
			exec(t, db, `CREATE TABLE items (id BIGINT PRIMARY KEY, stock INT NOT NULL,
 fence_token BIGINT UNSIGNED NOT NULL DEFAULT 0) ENGINE=InnoDB`,
				`INSERT INTO items (id, stock, fence_token) VALUES (1, 10, 50)`)
			addTriggers(t, db, "items", kind, body)
			items, _ := mysql.NewTable(mysql.TableOptions{Name: []string{"items"}, Key: "id", Check: token.NoCheck()})
			for _, tok := range []token.Token{60, 40} {
				if err := items.Update(ctx, db, 1, tok, mysql.Add("stock", -1)); !errors.Is(err, mysql.ErrTriggers) {
					t.Fatalf("Update with %d: %v, want ErrTriggers", tok, err)
				}
				if err := items.Upsert(ctx, db, 1, tok, mysql.Set("stock", 3)); !errors.Is(err, mysql.ErrTriggers) {
					t.Fatalf("Upsert with %d: %v, want ErrTriggers", tok, err)
				}
			}
			var stock int
			if err := db.QueryRowContext(ctx, `SELECT stock FROM items WHERE id = 1`).Scan(&stock); err != nil {
				t.Fatal(err)
			}
			// Table mode does not depend on the guarded table.
			err := mysql.Tx(ctx, db, "items/1", 70, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, `UPDATE items SET stock = stock - 1 WHERE id = 1`)
				return err
			})
			if err != nil {
				t.Fatalf("Tx on the table with triggers: %v", err)
			}
			err = mysql.Tx(ctx, db, "items/1", 65, func(*sql.Tx) error { return errors.New("ran") })
			stale(t, err, 65, 70)
		})
	}
}

// A BEFORE UPDATE trigger that keeps the mark where it was makes a claim
// above the mark leave it unmoved: that claim is not accepted, so a lower
// token cannot be accepted after it.
func TestClaimThatATriggerKeptFromAdvancingIsNotAccepted(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	db := newDB(t)
	tk, err := mysql.NewTokens(mysql.TokensOptions{Check: token.NoCheck(), Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := tk.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	f := tk.Fence(db)
	if err := f.Claim(ctx, "r", 10); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TRIGGER keep BEFORE UPDATE ON fence_tokens FOR EACH ROW SET NEW.token = OLD.token"); err != nil {
		t.Fatal(err)
	}
	if err := f.Claim(ctx, "r", 20); err == nil {
		t.Error("claim of 20 accepted with the mark left at 10")
	}
	ran := false
	if err := tk.Tx(ctx, db, "r", 20, func(*sql.Tx) error { ran = true; return nil }); err == nil || ran {
		t.Errorf("Tx of 20 with the mark left at 10: %v, fn ran %v", err, ran)
	}
	if err := tk.TxAll(ctx, db, map[string]token.Token{"r": 20}, func(*sql.Tx) error { ran = true; return nil }); err == nil || ran {
		t.Errorf("TxAll of 20 with the mark left at 10: %v, fn ran %v", err, ran)
	}
	if err := f.Claim(ctx, "r", 10); err != nil {
		t.Errorf("claim equal to the mark: %v", err)
	}
	if err := f.Claim(ctx, "r", 5); !errors.Is(err, token.ErrStale) {
		t.Errorf("claim below the mark: %v", err)
	}
}
