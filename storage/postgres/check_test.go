package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// countingDB is the pool with a count of what goes to the server through
// it: a refused token must send nothing.
type countingDB struct {
	postgres.DB
	calls atomic.Int64
}

func (c *countingDB) Begin(ctx context.Context) (pgx.Tx, error) {
	c.calls.Add(1)
	return c.DB.Begin(ctx)
}

func (c *countingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.calls.Add(1)
	return c.DB.QueryRow(ctx, sql, args...)
}

func (c *countingDB) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	c.calls.Add(1)
	return c.DB.SendBatch(ctx, b)
}

// forgedSetup is setup plus marks on every kind of store: row 1 at 5,
// resource sku:1 at 5, and key 2 deleted with 4 (a tombstone).
func forgedSetup(t *testing.T) (*countingDB, func() string) {
	t.Helper()
	pool, items := setup(t)
	ctx := ctxFor(t, time.Minute)
	if err := items.Update(ctx, pool, 1, 5, postgres.Set("stock", 9)); err != nil {
		t.Fatal(err)
	}
	if err := items.Upsert(ctx, pool, 2, 3); err != nil {
		t.Fatal(err)
	}
	if err := items.Delete(ctx, pool, 2, 4); err != nil {
		t.Fatal(err)
	}
	if err := postgres.Tx(ctx, pool, "sku:1", 5, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	return &countingDB{DB: pool}, func() string { return dump(t, pool, "items", "fence_tokens") }
}

// A forged token — 2^62, far above the clock — is refused by the default
// check on every path, before anything is sent, and moves no mark: not the
// row's, not a tombstone, not a resource's. Honest holders carry on.
func TestForgedRefused(t *testing.T) {
	t.Parallel()
	const forged = token.Token(1) << 62
	db, state := forgedSetup(t)
	items := newTable(t, postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id"})
	lazy, err := postgres.NewTokens(postgres.TokensOptions{ClaimWithFirstStatement: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, time.Minute)
	before := state()
	var stock int
	fnRan := false
	fn := func(tx pgx.Tx) error {
		fnRan = true
		_, err := tx.Exec(ctx, `UPDATE items SET stock = 0`)
		return err
	}
	for _, c := range []struct {
		name, resource string
		call           func(db postgres.DB) error
	}{
		{"Read", "items/1", func(db postgres.DB) error { return items.Read(ctx, db, 1, forged, []string{"stock"}, &stock) }},
		{"Update", "items/1", func(db postgres.DB) error { return items.Update(ctx, db, 1, forged, postgres.Set("stock", 0)) }},
		{"Upsert of a row", "items/1", func(db postgres.DB) error { return items.Upsert(ctx, db, 1, forged, postgres.Set("stock", 0)) }},
		{"Upsert of a deleted row", "items/2", func(db postgres.DB) error { return items.Upsert(ctx, db, 2, forged) }},
		{"Upsert of a new row", "items/3", func(db postgres.DB) error { return items.Upsert(ctx, db, 3, forged) }},
		{"Delete", "items/1", func(db postgres.DB) error { return items.Delete(ctx, db, 1, forged) }},
		{"Delete of a deleted row", "items/2", func(db postgres.DB) error { return items.Delete(ctx, db, 2, forged) }},
		{"Tx", "sku:1", func(db postgres.DB) error { return postgres.Tx(ctx, db, "sku:1", forged, fn) }},
		{"Tx, new resource", "sku:2", func(db postgres.DB) error { return postgres.Tx(ctx, db, "sku:2", forged, fn) }},
		{"Tx, claim with the first statement", "sku:1", func(db postgres.DB) error { return lazy.Tx(ctx, db, "sku:1", forged, fn) }},
		{"Tx, token from the context", "sku:1", func(db postgres.DB) error {
			return postgres.Tx(token.NewContext(ctx, "sku:1", forged), db, "", 0, fn)
		}},
		{"Fence", "sku:1", func(db postgres.DB) error { return postgres.NewFence(db).Claim(ctx, "sku:1", forged) }},
		{"Fence, new resource", "sku:2", func(db postgres.DB) error { return postgres.NewFence(db).Claim(ctx, "sku:2", forged) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			db.calls.Store(0)
			fnRan, stock = false, -1
			err := c.call(db)
			var fe *token.ForgedError
			if !errors.As(err, &fe) || !errors.Is(err, token.ErrForged) {
				t.Fatalf("got %v, want a *token.ForgedError", err)
			}
			if fe.Resource != c.resource || fe.Presented != forged || fe.By != "clock" {
				t.Fatalf("ForgedError %+v, want resource %q, presented %d, by the clock", fe, c.resource, forged)
			}
			if n := db.calls.Load(); n != 0 {
				t.Fatalf("%d calls reached the database", n)
			}
			if fnRan || stock != -1 {
				t.Fatal("fn ran, or a destination was filled")
			}
			if after := state(); after != before {
				t.Fatalf("a forged token moved a mark:\n%s\nwas\n%s", after, before)
			}
		})
	}
	// Inside the caller's transaction too.
	outer, err := db.DB.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Rollback(context.Background())
	if err := postgres.Tx(ctx, outer, "sku:1", forged, fn); !errors.Is(err, token.ErrForged) {
		t.Fatalf("nested Tx: got %v, want ErrForged", err)
	}
	if err := items.Update(ctx, outer, 1, forged, postgres.Set("stock", 0)); !errors.Is(err, token.ErrForged) {
		t.Fatalf("Update in a transaction: got %v, want ErrForged", err)
	}
	if err := outer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if after := state(); after != before {
		t.Fatalf("a forged token moved a mark:\n%s\nwas\n%s", after, before)
	}
	// The honest holders were not locked out.
	if err := items.Update(ctx, db, 1, 6, postgres.Set("stock", 8)); err != nil {
		t.Fatal(err)
	}
	if err := items.Upsert(ctx, db, 2, 6); err != nil {
		t.Fatal(err)
	}
	if err := postgres.Tx(ctx, db, "sku:1", 6, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := postgres.NewFence(db).Claim(ctx, "sku:1", 7); err != nil {
		t.Fatal(err)
	}
}

// token.NoCheck restores the behaviour of old: the forged token is
// accepted, and from then on every honest holder is refused — the lockout
// the default check prevents.
func TestForgedWithoutCheck(t *testing.T) {
	t.Parallel()
	const forged = token.Token(1) << 62
	db, _ := forgedSetup(t)
	ctx := ctxFor(t, time.Minute)
	items := newTable(t, postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id", Check: token.NoCheck()})
	marks, err := postgres.NewTokens(postgres.TokensOptions{Check: token.NoCheck()})
	if err != nil {
		t.Fatal(err)
	}
	if err := items.Update(ctx, db, 1, forged, postgres.Set("stock", 0)); err != nil {
		t.Fatal(err)
	}
	stale(t, items.Update(ctx, db, 1, 6, postgres.Set("stock", 8)), 6, forged)
	if err := items.Upsert(ctx, db, 2, forged); err != nil {
		t.Fatal(err)
	}
	if err := items.Delete(ctx, db, 2, forged); err != nil {
		t.Fatal(err)
	}
	stale(t, items.Upsert(ctx, db, 2, 6), 6, forged)
	if err := marks.Tx(ctx, db, "sku:1", forged, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	stale(t, postgres.Tx(ctx, db, "sku:1", 6, func(pgx.Tx) error { return nil }), 6, forged)
	if err := marks.Fence(db).Claim(ctx, "sku:3", forged); err != nil {
		t.Fatal(err)
	}
	stale(t, postgres.NewFence(db).Claim(ctx, "sku:3", 6), 6, forged)
}

var errUndecided = errors.New("the sequencer did not answer")

// A check of one's own sees the resource name each enforcer documents
// and the token (the context's, when none is passed); its refusal comes
// back as it returned it, and anything else it returns refuses too.
func TestCustomCheck(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	ctx := ctxFor(t, time.Minute)
	exec(t, pool,
		`CREATE TABLE skus (sku text PRIMARY KEY, qty int, fence_token bigint NOT NULL DEFAULT 0)`,
		`CREATE TABLE things (id uuid PRIMARY KEY, fence_token bigint NOT NULL DEFAULT 0)`)
	var (
		mu   sync.Mutex
		seen []string
	)
	check := token.CheckFunc(func(_ context.Context, resource string, tok token.Token) error {
		mu.Lock()
		seen = append(seen, fmt.Sprint(resource, "=", tok))
		mu.Unlock()
		switch tok {
		case 13:
			return &token.ForgedError{Resource: resource, Presented: tok, Bound: 12, By: "test"}
		case 14:
			return errUndecided
		}
		return nil
	})
	seenNow := func() []string {
		mu.Lock()
		defer mu.Unlock()
		s := seen
		seen = nil
		return s
	}
	items := newTable(t, postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id", Check: check})
	skus := newTable(t, postgres.TableOptions{Name: pgx.Identifier{"public", "skus"}, Key: "sku", Check: check})
	things := newTable(t, postgres.TableOptions{Name: pgx.Identifier{"things"}, Key: "id", Check: check})
	marks, err := postgres.NewTokens(postgres.TokensOptions{Check: check})
	if err != nil {
		t.Fatal(err)
	}
	lazy, err := postgres.NewTokens(postgres.TokensOptions{Check: check, ClaimWithFirstStatement: true})
	if err != nil {
		t.Fatal(err)
	}
	var stock int
	uuid := [16]byte{0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	none := func(pgx.Tx) error { return nil }
	steps := []struct {
		call func() error
		want string
	}{
		{func() error { return items.Read(ctx, pool, 1, 12, []string{"stock"}, &stock) }, "items/1=12"},
		{func() error { return items.Update(ctx, pool, int64(1), 12, postgres.Set("stock", 3)) }, "items/1=12"},
		{func() error {
			return items.Update(token.NewContext(ctx, "items/1", 12), pool, 1, 0, postgres.Set("stock", 3))
		}, "items/1=12"},
		{func() error { return items.Upsert(ctx, pool, 7, 12) }, "items/7=12"},
		{func() error { return items.Delete(ctx, pool, 7, 12) }, "items/7=12"},
		{func() error { return skus.Upsert(ctx, pool, "A-1", 12) }, "public.skus/A-1=12"},
		{func() error { return things.Upsert(ctx, pool, uuid, 12) }, "things/6ba7b810-9dad-11d1-80b4-00c04fd430c8=12"},
		{func() error { return marks.Tx(ctx, pool, "sku:1", 12, none) }, "sku:1=12"},
		{func() error { return marks.Tx(token.NewContext(ctx, "sku:1", 12), pool, "", 0, none) }, "sku:1=12"},
		{func() error { return lazy.Tx(ctx, pool, "sku:1", 12, none) }, "sku:1=12"},
		{func() error { return marks.Fence(pool).Claim(ctx, "sku:1", 12) }, "sku:1=12"},
	}
	for i, s := range steps {
		if err := s.call(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := seenNow(); len(got) != 1 || got[0] != s.want {
			t.Fatalf("step %d: the check saw %q, want %q", i, got, s.want)
		}
	}
	before := dump(t, pool, "items", "skus", "things", "fence_tokens")
	for _, tok := range []token.Token{13, 14} {
		want := error(errUndecided)
		if tok == 13 {
			want = token.ErrForged
		}
		for i, err := range []error{
			items.Read(ctx, pool, 1, tok, []string{"stock"}, &stock),
			items.Update(ctx, pool, 1, tok, postgres.Set("stock", 0)),
			items.Upsert(ctx, pool, 8, tok),
			items.Delete(ctx, pool, 1, tok),
			marks.Tx(ctx, pool, "sku:1", tok, none),
			lazy.Tx(ctx, pool, "sku:1", tok, none),
			marks.Fence(pool).Claim(ctx, "sku:1", tok),
		} {
			if !errors.Is(err, want) {
				t.Errorf("token %d, call %d: got %v, want %v", tok, i, err, want)
			}
			var fe *token.ForgedError
			if tok == 13 && (!errors.As(err, &fe) || fe.By != "test") {
				t.Errorf("token 13, call %d: got %v, want the check's own ForgedError", i, err)
			}
		}
	}
	if after := dump(t, pool, "items", "skus", "things", "fence_tokens"); after != before {
		t.Fatalf("a refusal by the check moved a mark:\n%s\nwas\n%s", after, before)
	}
	// Stale errors name the row as the check saw it.
	if err := items.Update(ctx, pool, 1, 20, postgres.Set("stock", 1)); err != nil {
		t.Fatal(err)
	}
	seenNow()
	err = items.Update(ctx, pool, 1, 19, postgres.Set("stock", 1))
	var se *token.StaleError
	if !errors.As(err, &se) || se.Resource != "items/1" {
		t.Fatalf("got %v, want a StaleError for items/1", err)
	}
	if got := seenNow(); len(got) != 1 || got[0] != "items/1=19" {
		t.Fatalf("the check saw %q", got)
	}
}
