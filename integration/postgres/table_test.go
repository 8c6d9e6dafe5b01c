package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// TestTombstoneAfterPrune: a deleted row's tombstone pruned; re-creating
// the row under a token below the delete's must be refused.
func TestTombstoneAfterPrune(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	for _, db := range []struct {
		name string
		db   postgres.DB
		o    token.Token
	}{{"rc", e.pool, 0}, {"rr", e.rr, 1000}} {
		t.Run(db.name, func(t *testing.T) {
			id := int64(len(db.name)) + rand.Int64N(1e9)
			if err := e.items.Upsert(ctx, db.db, id, 100+db.o, postgres.Set("stock", 1)); err != nil {
				t.Fatal(err)
			}
			if err := e.items.Delete(ctx, db.db, id, 200+db.o); err != nil {
				t.Fatal(err)
			}
			if _, err := e.toks.Prune(ctx, e.pool, time.Microsecond); err != nil {
				t.Fatal(err)
			}
			if err := e.items.Upsert(ctx, db.db, id, 150+db.o, postgres.Set("stock", 666)); !isStale(err) {
				t.Errorf("upsert 150 after delete 200 + prune: %v, want stale", err)
			}
			if err := e.items.Delete(ctx, db.db, id, 150+db.o); !errors.Is(err, postgres.ErrNoRow) {
				t.Errorf("delete of absent row: %v", err)
			}
			if err := e.items.Upsert(ctx, db.db, id, 201+db.o, postgres.Set("stock", 2)); err != nil {
				t.Errorf("upsert 201: %v", err)
			}
		})
	}
}

// TestUpdateRace races Update(Add, Where) with raises (Read), deletes,
// re-creates (Upsert) and Prune on a few rows, old and new tokens.
func TestUpdateRace(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	mono := &monotone{max: map[string]token.Token{}}
	var next atomic.Int64
	next.Store(1000)
	for id := range 3 {
		if err := e.items.Upsert(ctx, e.pool, int64(id), 1, postgres.Set("stock", 3)); err != nil {
			t.Fatal(err)
		}
	}
	var counts sync.Map
	inc := func(s string) {
		v, _ := counts.LoadOrStore(s, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}
	stop := make(chan struct{})
	var pw sync.WaitGroup
	pw.Add(1)
	go func() {
		defer pw.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := e.toks.Prune(ctx, e.pool, time.Microsecond); err != nil {
				t.Errorf("prune: %v", err)
				return
			}
		}
	}()
	deadline := time.Now().Add(6 * time.Second)
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 11))
			db := postgres.DB(e.pool)
			if g%3 == 2 {
				db = e.rr
			}
			for time.Now().Before(deadline) {
				id := int64(r.IntN(3))
				k := string(rune('0' + id))
				floor := mono.before(k)
				tk := token.Token(next.Add(1))
				if r.IntN(2) == 0 {
					tk = token.Token(max(1, int64(floor)-int64(r.IntN(3))))
				}
				op := []string{"update", "update", "update", "read", "delete", "upsert"}[r.IntN(6)]
				var err error
				switch op {
				case "update":
					err = e.items.Update(ctx, db, id, tk, postgres.Add("stock", -1), postgres.Where("stock > 0"))
				case "read":
					var s int
					err = e.items.Read(ctx, db, id, tk, []string{"stock"}, &s)
				case "delete":
					err = e.items.Delete(ctx, db, id, tk)
				case "upsert":
					err = e.items.Upsert(ctx, db, id, tk, postgres.Set("stock", 2))
				}
				var ce *postgres.ConditionError
				switch {
				case err == nil || errors.As(err, &ce):
					outcome := "ok"
					if ce != nil {
						outcome = "condition"
					}
					inc(op + " " + outcome)
					if tk < floor {
						t.Errorf("STALE ACCEPTED: %s row %d token %d (%s) after %d completed", op, id, tk, outcome, floor)
					}
					mono.accepted(k, tk)
				case isStale(err):
					checkStale(t, err)
					inc(op + " stale")
				case errors.Is(err, postgres.ErrNoRow):
					inc(op + " norow")
				default:
					inc(op + " other")
					t.Errorf("%s row %d token %d: %v", op, id, tk, err)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	pw.Wait()
	counts.Range(func(k, v any) bool { t.Logf("%-18s %d", k, v.(*atomic.Int64).Load()); return true })
	rows, err := e.pool.Query(ctx, `SELECT id, stock, fence_token FROM items`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, stock, ft int64
		if err := rows.Scan(&id, &stock, &ft); err != nil {
			t.Fatal(err)
		}
		if stock < 0 {
			t.Errorf("row %d stock %d", id, stock)
		}
		if m := mono.before(string(rune('0' + id))); token.Token(ft) < m {
			t.Errorf("row %d mark %d below accepted %d", id, ft, m)
		}
	}
	rows.Close()
}

// TestUpdateOutcomesDeterministic: ConditionError claims, stale wins over
// a false condition, no row is ErrNoRow.
func TestUpdateOutcomesDeterministic(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	if err := e.items.Upsert(ctx, e.pool, 7, 10, postgres.Set("stock", 0)); err != nil {
		t.Fatal(err)
	}
	var ce *postgres.ConditionError
	if err := e.items.Update(ctx, e.pool, 7, 20, postgres.Add("stock", -1), postgres.Where("stock > 0")); !errors.As(err, &ce) {
		t.Fatalf("sold out: %v", err)
	}
	if err := e.items.Update(ctx, e.pool, 7, 15, postgres.Add("stock", -1), postgres.Where("stock > 0")); !isStale(err) {
		t.Errorf("15 after condition claim at 20: %v, want stale", err)
	}
	if err := e.items.Update(ctx, e.pool, 7, 15, postgres.Add("stock", 1), postgres.Where("stock >= 0")); !isStale(err) {
		t.Errorf("15 with a true condition after 20: %v, want stale", err)
	}
	if err := e.items.Update(ctx, e.pool, 7, 25, postgres.Add("stock", 1), postgres.Where("stock IS NULL")); !errors.As(err, &ce) {
		t.Errorf("NULL-ish false condition: %v", err)
	}
	if err := e.items.Update(ctx, e.pool, 8, 25, postgres.Add("stock", 1), postgres.Where("stock > 0")); !errors.Is(err, postgres.ErrNoRow) {
		t.Errorf("no row: %v", err)
	}
	// A condition referring to the token column cannot lift the check.
	if err := e.items.Update(ctx, e.pool, 7, 1, postgres.Add("stock", 100), postgres.Where("fence_token > 0 OR true")); !isStale(err) {
		t.Errorf("token-column condition: %v", err)
	}
	var stock, ft int64
	if err := e.pool.QueryRow(ctx, `SELECT stock, fence_token FROM items WHERE id = 7`).Scan(&stock, &ft); err != nil {
		t.Fatal(err)
	}
	if stock != 0 || ft != 25 {
		t.Errorf("row 7 = stock %d mark %d, want 0, 25", stock, ft)
	}
}

// TestLockKeyResolve: a context token of another key is never used.
func TestLockKeyResolve(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	sku, err := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id", Tokens: e.toks,
		Check: token.NoCheck(), LockKey: postgres.LockKeyPrefix("sku:")})
	if err != nil {
		t.Fatal(err)
	}
	for id := range 3 {
		if err := e.items.Upsert(ctx, e.pool, int64(id), 5, postgres.Set("stock", 1)); err != nil {
			t.Fatal(err)
		}
	}
	c1 := token.NewContext(ctx, "sku:1", 50)
	checks := []struct {
		name string
		err  error
	}{
		{"sku update other key", sku.Update(c1, e.pool, int64(2), 0, postgres.Add("stock", 1), postgres.Where("stock > 0"))},
		{"sku plain update other key", sku.Update(c1, e.pool, int64(2), 0, postgres.Set("stock", 9))},
		{"sku read other key", sku.Read(c1, e.pool, int64(2), 0, []string{"stock"}, new(int))},
		{"sku delete other key", sku.Delete(c1, e.pool, int64(2), 0)},
		{"sku upsert other key", sku.Upsert(c1, e.pool, int64(99), 0, postgres.Set("stock", 9))},
		{"default table with sku ctx", e.items.Update(c1, e.pool, int64(1), 0, postgres.Set("stock", 9))},
		{"default upsert new key", e.items.Upsert(c1, e.pool, int64(98), 0, postgres.Set("stock", 9))},
		{"fence other key", e.toks.Fence(e.pool).Claim(c1, "sku:2", 0)},
		{"tx other key", e.toks.Tx(c1, e.pool, "sku:2", 0, func(pgx.Tx) error { t.Error("fn ran"); return nil })},
		{"sku update key as string '1 '", sku.Update(c1, e.pool, "1 ", 0, postgres.Set("stock", 9))},
	}
	for _, c := range checks {
		if !errors.Is(c.err, token.ErrMissing) || !strings.Contains(fmt.Sprint(c.err), "the context carries the token of lock") {
			t.Errorf("%s: %v, want ErrMissing naming both keys", c.name, c.err)
		} else {
			t.Logf("%s: refused: %v", c.name, c.err)
		}
	}
	if err := sku.Update(c1, e.pool, int64(1), 0, postgres.Add("stock", 1), postgres.Where("stock > 0")); err != nil {
		t.Errorf("own key: %v", err)
	}
	var moved int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM items WHERE fence_token <> 5 AND id <> 1`).Scan(&moved); err != nil || moved != 0 {
		t.Errorf("rows moved by refused calls: %d, %v", moved, err)
	}
	var ft int64
	_ = e.pool.QueryRow(ctx, `SELECT fence_token FROM items WHERE id = 1`).Scan(&ft)
	if ft != 50 {
		t.Errorf("row 1 mark %d, want 50", ft)
	}
	// Aliases: a lock key spelled otherwise that the server reads as the same row.
	c01 := token.NewContext(ctx, "sku:01", 60)
	err = sku.Update(c01, e.pool, "01", 0, postgres.Set("stock", 42))
	t.Logf("ALIAS: ctx token of lock sku:01, Update(key \"01\") -> %v", err)
	_ = e.pool.QueryRow(ctx, `SELECT fence_token FROM items WHERE id = 1`).Scan(&ft)
	t.Logf("ALIAS: row 1 mark now %d (50 before: a token of lock sku:01 wrote the row lock sku:1 guards if 60)", ft)
	// The empty key: a context for "" and the floor row.
	ce := token.NewContext(ctx, "", 1<<40)
	errTx := e.toks.Tx(ce, e.pool, "", 0, func(pgx.Tx) error { return nil })
	errF := e.toks.Fence(e.pool).Claim(ce, "", 0)
	_, errR := e.toks.Reset(ctx, e.pool, "", 1<<41)
	fl, _ := e.toks.Floor(ctx, e.pool)
	t.Logf("empty key: Tx %v; Fence %v; Reset %v; floor now %d", errTx, errF, errR, fl)
	if fl >= 1<<40 {
		t.Errorf("the floor row was claimed through the empty resource: floor %d", fl)
	}
}
