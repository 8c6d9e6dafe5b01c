package mysql_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/storage/mysql"
	"github.com/fenceguard/fenceguard/token"
)

// With LockKey, a zero token is the context's token of the row's own
// lock ("sku:<id>"), and a token of another lock is refused as missing,
// naming both keys, with nothing written; without LockKey, the lock key
// is the resource name and the error says how to map it.
func TestLockKeyTakesTheTokenOfTheRowsLock(t *testing.T) {
	db := newDB(t)
	ctx := ctxFor(t, time.Minute)
	if err := mysql.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	exec(t, db, `CREATE TABLE items (id BIGINT PRIMARY KEY, stock INT NOT NULL,
 fence_token BIGINT UNSIGNED NOT NULL DEFAULT 0) ENGINE=InnoDB`,
		`INSERT INTO items (id, stock) VALUES (1, 10), (2, 10)`)
	items, err := mysql.NewTable(mysql.TableOptions{Name: []string{"items"}, Key: "id",
		Check: token.NoCheck(), LockKey: mysql.LockKeyPrefix("sku:")})
	if err != nil {
		t.Fatal(err)
	}
	stockOf := func(id int) (n int, mark uint64) {
		t.Helper()
		if err := db.QueryRowContext(ctx, `SELECT stock, fence_token FROM items WHERE id = ?`, id).Scan(&n, &mark); err != nil {
			t.Fatal(err)
		}
		return n, mark
	}

	held := token.NewContext(ctx, "sku:1", 7)
	if err := items.Update(held, db, 1, 0, mysql.Add("stock", -1)); err != nil {
		t.Fatalf("Update of row 1 under sku:1's token: %v", err)
	}
	if n, mark := stockOf(1); n != 9 || mark != 7 {
		t.Fatalf("row 1: stock %d, mark %d; want 9, 7", n, mark)
	}
	err = items.Update(held, db, 2, 0, mysql.Add("stock", -1))
	if !errors.Is(err, token.ErrMissing) || !strings.Contains(err.Error(), `"sku:1"`) || !strings.Contains(err.Error(), `"sku:2"`) {
		t.Fatalf("Update of row 2 under sku:1's token: %v, want ErrMissing naming both keys", err)
	}
	if n, mark := stockOf(2); n != 10 || mark != 0 {
		t.Fatalf("row 2 after the refusal: stock %d, mark %d; want 10, 0", n, mark)
	}
	if err := items.Update(held, db, 2, 8, mysql.Add("stock", -1)); err != nil {
		t.Fatalf("Update of row 2 with an explicit token: %v", err)
	}

	plain, _ := mysql.NewTable(mysql.TableOptions{Name: []string{"items"}, Key: "id", Check: token.NoCheck()})
	err = plain.Update(held, db, 1, 0, mysql.Add("stock", -1))
	if !errors.Is(err, token.ErrMissing) || !strings.Contains(err.Error(), "LockKey") {
		t.Fatalf("Update without LockKey under sku:1's token: %v, want ErrMissing pointing at LockKey", err)
	}
	if err := plain.Update(token.NewContext(context.Background(), "items/1", 9), db, 1, 0, mysql.Add("stock", -1)); err != nil {
		t.Fatalf("Update without LockKey under the resource's own token: %v", err)
	}
}

// A Table needs its key column named.
func TestNewTableWithoutKeyIsBadInput(t *testing.T) {
	_, err := mysql.NewTable(mysql.TableOptions{Name: []string{"items"}})
	if !errors.Is(err, mysql.ErrBadInput) || !strings.Contains(err.Error(), "Key") {
		t.Fatalf("NewTable without Key: %v, want ErrBadInput naming Key", err)
	}
}

// A []byte key names its row by its bytes, as a string key does: the lock
// of []byte("a") is the lock of "a", never the lock of the row "[97]".
func TestLockKeyOfAByteSliceKeyIsItsText(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	db := newDB(t)
	if err := mysql.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE bins (id VARBINARY(64) PRIMARY KEY, n INT NOT NULL DEFAULT 0, fence_token BIGINT UNSIGNED NOT NULL DEFAULT 0)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO bins (id) VALUES ('a'), ('[97]')"); err != nil {
		t.Fatal(err)
	}
	bins, err := mysql.NewTable(mysql.TableOptions{Name: []string{"bins"}, Key: "id",
		Check: token.NoCheck(), LockKey: mysql.LockKeyPrefix("bin:")})
	if err != nil {
		t.Fatal(err)
	}
	type raw []byte
	// The holder of the row "[97]" must not write the row "a".
	other := token.NewContext(context.Background(), "bin:[97]", 50)
	for _, key := range []any{[]byte("a"), raw("a")} {
		if err := bins.Update(other, db, key, 0, mysql.Add("n", 1)); !errors.Is(err, token.ErrMissing) {
			t.Errorf("Update of %T %q under the lock of another row: %v, want ErrMissing", key, key, err)
		}
	}
	var n int
	var mark uint64
	if err := db.QueryRowContext(ctx, "SELECT n, fence_token FROM bins WHERE id = 'a'").Scan(&n, &mark); err != nil {
		t.Fatal(err)
	}
	if n != 0 || mark != 0 {
		t.Fatalf("row a written under another row's lock: n %d, mark %d", n, mark)
	}
	// The holder of the row "a" writes it, whichever Go type names it.
	own := token.NewContext(context.Background(), "bin:a", 60)
	for _, key := range []any{"a", []byte("a"), raw("a")} {
		if err := bins.Update(own, db, key, 0, mysql.Add("n", 1)); err != nil {
			t.Errorf("Update of %T %q under its own lock: %v", key, key, err)
		}
	}
	var stale *token.StaleError
	if err := bins.Update(ctx, db, []byte("a"), 59); !errors.As(err, &stale) || stale.Resource != "bins/a" {
		t.Errorf("stale Update of []byte(\"a\"): %v, want a *token.StaleError for bins/a", err)
	}
}
