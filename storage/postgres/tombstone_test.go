package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/harness/pgserver"
	"github.com/fenceguard/fenceguard/storage/postgres"
)

// poolIn connects to pg with the session's TimeZone set.
func poolIn(t *testing.T, dsn, tz string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["timezone"] = tz
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// keyCase is a key column type and two spellings of one key: values the
// column's equality holds equal, and its unique index one key.
type keyCase struct {
	name, typ string
	k, k2     any
	// refused: the type (as PostgreSQL formats it) that tombstones must
	// refuse; "" when they must accept it.
	refused string
	// tokyo sends k2 from a session whose TimeZone is Asia/Tokyo.
	tokyo bool
}

// The resurrection of issue 15: Upsert(k, 10), Delete(k, 20), then
// Upsert(k2, 15) with k2 another spelling of k. The row was deleted under
// token 20; re-creating it under 15 is a stale write. Tombstones named by
// the key's text let it through for every type whose equal values print
// differently; now such types are refused with a typed error before
// anything is written, and the types that are accepted refuse the stale
// re-creation.
func TestTombstoneKeyTypes(t *testing.T) {
	t.Parallel()
	pg := pgserver.Shared(t)
	utc, tokyo := poolIn(t, pg.DSN, "UTC"), poolIn(t, pg.DSN, "Asia/Tokyo")
	ctx := ctxFor(t, 2*time.Minute)
	if err := postgres.Migrate(ctx, utc); err != nil {
		t.Fatal(err)
	}
	exec(t, utc,
		`CREATE EXTENSION citext`,
		`CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`,
		`CREATE DOMAIN email AS citext`,
		`CREATE DOMAIN item_id AS bigint CHECK (VALUE > 0)`)
	instant := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []keyCase{
		{name: "citext", typ: "citext", k: "Alice@example.com", k2: "alice@example.com", refused: "citext"},
		{name: "domain over citext", typ: "email", k: "Alice@example.com", k2: "ALICE@example.com", refused: "email"},
		{name: "nondeterministic collation", typ: "text COLLATE ci", k: "Alice", k2: "alice", refused: "text"},
		{name: "numeric", typ: "numeric", k: "1.0", k2: "1.00", refused: "numeric"},
		{name: "numeric with a scale", typ: "numeric(10,2)", k: "1", k2: "1.00", refused: "numeric(10,2)"},
		{name: "float", typ: "double precision", k: "0", k2: "-0", refused: "double precision"},
		{name: "timestamptz", typ: "timestamptz", k: instant, k2: instant, tokyo: true, refused: "timestamp with time zone"},
		{name: "bigint", typ: "bigint", k: int64(7), k2: int32(7)},
		{name: "integer", typ: "integer", k: 7, k2: int16(7)},
		{name: "domain over bigint", typ: "item_id", k: 7, k2: 7},
		{name: "text", typ: "text", k: "Alice", k2: "Alice"},
		{name: "varchar", typ: "varchar(20)", k: "Alice", k2: "Alice"},
		{name: "char, trailing blanks", typ: "char(8)", k: "ab", k2: "ab   "},
		{name: "uuid, capitals", typ: "uuid", k: "6ba7b810-9dad-11d1-80b4-00c04fd430c8", k2: "6BA7B810-9DAD-11D1-80B4-00C04FD430C8"},
		{name: "boolean", typ: "boolean", k: true, k2: "t"},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := "t_" + strings.NewReplacer(" ", "_", ",", "").Replace(c.name)
			exec(t, utc, `CREATE TABLE `+name+` (k `+c.typ+` PRIMARY KEY, v int, fence_token bigint NOT NULL DEFAULT 0)`)
			tb := newTable(t, postgres.TableOptions{Name: pgx.Identifier{name}, Key: "k"})
			db2 := utc
			if c.tokyo {
				db2 = tokyo
			}
			err := resurrect(t, ctx, utc, db2, tb, name, c.k, c.k2)
			if c.refused == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			checkKeyTypeError(t, err, name, c.refused)
			t.Logf("refused: %v", err)
			checkKeyTypeError(t, tb.Delete(ctx, utc, c.k, 20), name, c.refused)
			checkKeyTypeError(t, tb.Verify(ctx, utc), name, c.refused)
			if d := dump(t, utc, name, "fence_tokens"); d != name+": \nfence_tokens: \n" {
				t.Fatalf("a refused key type wrote:\n%s", d)
			}
			// Rows inserted otherwise are read and updated under their marks.
			if _, err := utc.Exec(ctx, `INSERT INTO `+name+` (k, v) VALUES ($1, 1)`, c.k); err != nil {
				t.Fatal(err)
			}
			if err := tb.Update(ctx, utc, c.k, 5, postgres.Set("v", 2)); err != nil {
				t.Fatalf("Update with a refused key type: %v", err)
			}
			stale(t, tb.Update(ctx, db2, c.k2, 4, postgres.Set("v", 3)), 4, 5)
			if err := tb.Upsert(ctx, db2, c.k2, 6, postgres.Set("v", 4)); err != nil {
				t.Fatalf("Upsert of an existing row with a refused key type: %v", err)
			}
		})
	}
}

// resurrect runs the sequence of the issue and fails the test if the row
// deleted under 20 comes back under 15. It returns the first refusal of an
// Upsert or Delete that is not a stale token.
func resurrect(t *testing.T, ctx context.Context, db, db2 postgres.DB, tb *postgres.Table, name string, k, k2 any) error {
	t.Helper()
	if err := tb.Upsert(ctx, db, k, 10, postgres.Set("v", 1)); err != nil {
		return err
	}
	if err := tb.Delete(ctx, db, k, 20); err != nil {
		return err
	}
	err := tb.Upsert(ctx, db2, k2, 15, postgres.Set("v", 2))
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM `+name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if err == nil || n != 0 {
		t.Fatalf("the row deleted under token 20 was re-created under 15 as %v (Upsert: %v; %d rows)", k2, err, n)
	}
	stale(t, err, 15, 20)
	// The deleting holder and newer ones may re-create it, in either
	// spelling.
	if err := tb.Upsert(ctx, db2, k2, 21, postgres.Set("v", 3)); err != nil {
		t.Fatal(err)
	}
	stale(t, tb.Upsert(ctx, db, k, 20, postgres.Set("v", 4)), 20, 21)
	return nil
}

func checkKeyTypeError(t *testing.T, err error, table, typ string) {
	t.Helper()
	var se *postgres.SchemaError
	var kte *postgres.KeyTypeError
	if !errors.As(err, &se) || !errors.Is(err, postgres.ErrSchema) || !errors.As(err, &kte) {
		t.Fatalf("got %v, want a *SchemaError caused by a *KeyTypeError", err)
	}
	if se.Object != table || kte.Column != "k" || kte.Type != typ || kte.Reason == "" {
		t.Fatalf("SchemaError on %q, KeyTypeError %+v; want table %q, column k, type %q and a reason", se.Object, kte, table, typ)
	}
}

// A unique index that compares under a nondeterministic collation makes
// a text key with a deterministic one unfit too, and Verify says so at
// start-up; a fit table's Verify passes, once.
func TestVerify(t *testing.T) {
	t.Parallel()
	pool, items := setup(t)
	ctx := ctxFor(t, time.Minute)
	exec(t, pool,
		`CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`,
		`CREATE TABLE users (id bigint PRIMARY KEY, email text NOT NULL, fence_token bigint NOT NULL DEFAULT 0)`,
		`CREATE UNIQUE INDEX users_email ON users (email COLLATE ci)`,
		`CREATE TABLE tagged (tags text[] PRIMARY KEY, fence_token bigint NOT NULL DEFAULT 0)`)
	if err := items.Verify(ctx, pool); err != nil {
		t.Fatal(err)
	}
	users := newTable(t, postgres.TableOptions{Name: pgx.Identifier{"users"}, Key: "email"})
	err := users.Verify(ctx, pool)
	var kte *postgres.KeyTypeError
	if !errors.As(err, &kte) || kte.Column != "email" || !strings.Contains(kte.Reason, "ci") {
		t.Fatalf("Verify = %v, want a KeyTypeError naming the index's collation", err)
	}
	tagged := newTable(t, postgres.TableOptions{Name: pgx.Identifier{"tagged"}, Key: "tags"})
	if err := tagged.Verify(ctx, pool); !errors.As(err, &kte) || kte.Type != "text[]" {
		t.Fatalf("Verify of an array key = %v, want a KeyTypeError", err)
	}
	for _, tb := range []*postgres.Table{
		newTable(t, postgres.TableOptions{Name: pgx.Identifier{"nope"}, Key: "id"}),
		newTable(t, postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "nope"}),
	} {
		var se *postgres.SchemaError
		if err := tb.Verify(ctx, pool); !errors.As(err, &se) || errors.As(err, &kte) {
			t.Fatalf("Verify of %v = %v, want a SchemaError", tb, err)
		}
	}
	// A success is remembered: no query (a nil DB would be refused).
	if err := items.Verify(ctx, nil); err != nil {
		t.Fatalf("second Verify = %v, want the remembered success", err)
	}
}
