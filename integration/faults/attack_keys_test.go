package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/storage/postgres"
)

// keys/postgres: key types whose equal values print differently — citext
// ('Alice@…' and 'alice@…'), numeric (1.0 and 1.00), a nondeterministic
// ICU collation ('Alice' and 'alice'), timestamptz sent from sessions in
// two TimeZones (one instant, two spellings). A holder upserts k under
// token 10 and deletes it under 20; then a stale holder upserts k' —
// another spelling of k — under 15. That re-creation is a stale write and
// must be refused: storage/postgres refuses such key types (a
// *KeyTypeError from Table.Verify, before anything is written). The
// control is the code before the fix, written here in plain SQL: the
// tombstone named "<table>/" + the key as text, looked up by the new
// spelling's text, which it does not find — the row is back, marked 15.

func init() {
	registerAttack(attack{
		Name: "keys/postgres",
		About: "Upsert(k,10), Delete(k,20), Upsert(k',15) with k' another spelling of k (citext, numeric, ICU nondeterministic collation, timestamptz in two TimeZones); " +
			"control: the old tombstone named by the key's text lets the row back in",
		Rounds: 2,
		Short:  1,
		Run:    runKeys,
	})
}

// keySpelling is a key type and two spellings of one key.
type keySpelling struct {
	name, typ, cast string // cast: the type to cast the key parameter to in the control's SQL
	k, k2           any
	tokyo           bool // k2 is sent from a session in Asia/Tokyo
}

func runKeys(t *testing.T, s *attackStats) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	utc, pg := attackPG(t, ctx)
	tokyo := poolInZone(t, ctx, pg.DSN, "Asia/Tokyo")
	utc = poolInZone(t, ctx, pg.DSN, "UTC")

	instant := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cases := []keySpelling{
		{name: "numeric", typ: "numeric", cast: "numeric", k: "1.0", k2: "1.00"},
		{name: "timestamptz", typ: "timestamptz", cast: "timestamptz", k: instant, k2: instant, tokyo: true},
	}
	var avail bool
	if err := utc.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_available_extensions WHERE name = 'citext')`).Scan(&avail); err != nil {
		t.Fatal(err)
	}
	if !avail {
		missingKeyType(t, "citext: the extension is not installed on this PostgreSQL")
	} else if _, err := utc.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS citext`); err != nil {
		missingKeyType(t, fmt.Sprintf("citext: CREATE EXTENSION: %v", err))
	} else {
		cases = append(cases, keySpelling{name: "citext", typ: "citext", cast: "citext", k: "Alice@example.com", k2: "alice@example.com"})
	}
	if _, err := utc.Exec(ctx, `CREATE COLLATION fg_ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`); err != nil {
		missingKeyType(t, fmt.Sprintf("ICU nondeterministic collation: %v", err))
	} else {
		cases = append(cases, keySpelling{name: "icu", typ: "text COLLATE fg_ci", cast: "text", k: "Alice", k2: "alice"})
	}

	for round := range s.Rounds() {
		for _, c := range cases {
			db2 := utc
			if c.tokyo {
				db2 = tokyo
			}
			// Fenced: the library.
			name := fmt.Sprintf("keys_%s_%d", c.name, round)
			createKeyTable(t, ctx, utc, name, c.typ)
			tb, err := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{name}, Key: "k", Logger: quietLog})
			if err != nil {
				t.Fatal(err)
			}
			first := tb.Upsert(ctx, utc, c.k, 10, postgres.Set("v", 1))
			del := tb.Delete(ctx, utc, c.k, 20)
			stale := tb.Upsert(ctx, db2, c.k2, 15, postgres.Set("v", 2))
			rows := countRows(t, ctx, utc, name)
			var kte *postgres.KeyTypeError
			typed := errors.As(first, &kte) || errors.As(del, &kte)
			refused := stale != nil && rows == 0
			if !typed {
				t.Errorf("%s: the key type was not refused with a *KeyTypeError (upsert: %v, delete: %v)", name, first, del)
			}
			if !refused {
				t.Errorf("%s: the row deleted under 20 is back under 15 as %v (Upsert: %v; %d rows)", name, c.k2, stale, rows)
			}

			// Control: the tombstone named by the key's text.
			cname := name + "_control"
			createKeyTable(t, ctx, utc, cname, c.typ)
			oldUpsert(t, ctx, utc, cname, c.cast, c.k, 10, 1)
			oldDelete(t, ctx, utc, cname, c.k, 20)
			back := oldUpsert(t, ctx, db2, cname, c.cast, c.k2, 15, 2)
			crow := countRows(t, ctx, utc, cname)
			t.Logf("%s: fenced: %v; control: re-created %v (%d rows)", name, stale, back, crow)
			s.Add(func(s *attackStats) {
				s.Faults++
				s.Attempts++
				if refused {
					s.Refused++
				} else {
					s.Accepted++
				}
				if back && crow == 1 {
					s.Control++
				}
			})
		}
		s.Add(func(s *attackStats) { s.Runs++ })
	}
}

// poolInZone connects to dsn with the sessions' TimeZone set.
func poolInZone(t *testing.T, ctx context.Context, dsn, tz string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["timezone"] = tz
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func createKeyTable(t *testing.T, ctx context.Context, db *pgxpool.Pool, name, typ string) {
	t.Helper()
	if _, err := db.Exec(ctx, `CREATE TABLE `+pgx.Identifier{name}.Sanitize()+` (k `+typ+` PRIMARY KEY, v int, fence_token bigint NOT NULL DEFAULT 0)`); err != nil {
		t.Fatal(err)
	}
}

func countRows(t *testing.T, ctx context.Context, db *pgxpool.Pool, name string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{name}.Sanitize()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// oldUpsert is Table.Upsert before the fix: update the row if the token
// is not below its mark; with no row, insert unless the tombstone named
// "<table>/" + the key as text is above the token. It reports whether it
// wrote.
func oldUpsert(t *testing.T, ctx context.Context, db *pgxpool.Pool, name, cast string, k any, tok int64, v int) bool {
	t.Helper()
	tbl := pgx.Identifier{name}.Sanitize()
	tag, err := db.Exec(ctx, `UPDATE `+tbl+` SET v = $3, fence_token = $2 WHERE k = $1 AND fence_token <= $2`, k, tok, v)
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() > 0 {
		return true
	}
	tag, err = db.Exec(ctx, `INSERT INTO `+tbl+` (k, v, fence_token) SELECT $1::`+cast+`, $3, $2
 WHERE NOT EXISTS (SELECT FROM fence_tokens WHERE resource = $4 || ($1::`+cast+`)::text AND token > $2)
 ON CONFLICT (k) DO NOTHING`, k, tok, v, name+"/")
	if err != nil {
		t.Fatal(err)
	}
	return tag.RowsAffected() > 0
}

// oldDelete is Table.Delete before the fix: delete the row if the token is
// not below its mark, and leave a tombstone named by the key as text.
func oldDelete(t *testing.T, ctx context.Context, db *pgxpool.Pool, name string, k any, tok int64) {
	t.Helper()
	tbl := pgx.Identifier{name}.Sanitize()
	tag, err := db.Exec(ctx, `WITH d AS (DELETE FROM `+tbl+` WHERE k = $1 AND fence_token <= $2 RETURNING k)
INSERT INTO fence_tokens AS m (resource, token, updated_at) SELECT $3 || d.k::text, $2, now() FROM d
 ON CONFLICT (resource) DO UPDATE SET token = greatest(m.token, excluded.token), updated_at = excluded.updated_at`, k, tok, name+"/")
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() != 1 {
		t.Fatalf("%s: the old delete left no tombstone", name)
	}
}

// missingKeyType reports a key type the server cannot offer: skipped with a
// log, but under FENCEGUARD_REQUIRE_SERVERS=1 (CI, whose PostgreSQL has
// contrib and ICU) a failure, so the attack cannot quietly shrink there.
func missingKeyType(t *testing.T, why string) {
	t.Helper()
	if os.Getenv(harness.EnvRequireServers) == "1" {
		t.Errorf("%s (%s=1: every key type must be attacked)", why, harness.EnvRequireServers)
		return
	}
	t.Logf("%s; skipping that key type", why)
}
