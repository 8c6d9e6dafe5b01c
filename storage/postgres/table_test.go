package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// stale fails the test unless err is a StaleError for presented with
// current.
func stale(t testing.TB, err error, presented, current token.Token) {
	t.Helper()
	var se *token.StaleError
	if !errors.As(err, &se) || !errors.Is(err, token.ErrStale) {
		t.Fatalf("got %v, want a StaleError", err)
	}
	if se.Presented != presented || se.Current != current {
		t.Fatalf("StaleError %+v, want presented %d current %d", se, presented, current)
	}
}

func TestTableClaimReadUpdate(t *testing.T) {
	t.Parallel()
	pool, items := setup(t)
	ctx := ctxFor(t, time.Minute)

	var stock int
	var note *string
	if err := items.Read(ctx, pool, 1, 5, []string{"stock", "note"}, &stock, &note); err != nil {
		t.Fatal(err)
	}
	if stock != 10 || note != nil {
		t.Fatalf("Read = %d %v, want 10 <nil>", stock, note)
	}
	if _, mark := row(t, pool, 1); mark != 5 {
		t.Fatalf("Read left the mark at %d, want 5: reads claim", mark)
	}
	// The same holder again, and a write.
	if err := items.Update(ctx, pool, 1, 5, postgres.Set("stock", 9), postgres.Set("note", "sold one")); err != nil {
		t.Fatal(err)
	}
	// An older holder, reading and writing.
	err := items.Read(ctx, pool, 1, 4, []string{"stock"}, &stock)
	stale(t, err, 4, 5)
	if stock != 10 {
		t.Fatalf("a refused Read filled its destination with %d", stock)
	}
	stale(t, items.Update(ctx, pool, 1, 4, postgres.Set("stock", 0)), 4, 5)
	var se *token.StaleError
	errors.As(items.Update(ctx, pool, 1, 3, postgres.Set("stock", 0)), &se)
	if se.Resource != "items/1" {
		t.Fatalf("StaleError.Resource = %q, want items/1", se.Resource)
	}
	// A newer holder.
	if err := items.Read(ctx, pool, 1, 7, []string{"stock", "note", "fence_token", "id"}, &stock, &note, new(int64), new(int64)); err != nil {
		t.Fatal(err)
	}
	if stock != 9 || note == nil || *note != "sold one" {
		t.Fatalf("Read = %d %v, want the write of token 5", stock, note)
	}
	if stock, mark := row(t, pool, 1); stock != 9 || mark != 7 {
		t.Fatalf("row = stock %d mark %d, want 9 and 7", stock, mark)
	}
	// A claim without columns.
	if err := items.Read(ctx, pool, 1, 8, nil); err != nil {
		t.Fatal(err)
	}
	if _, mark := row(t, pool, 1); mark != 8 {
		t.Fatalf("mark %d after a bare claim with 8", mark)
	}
}

// The race of docs/design.md: A (token 5) reads stock and pauses; B (token
// 6) reads and writes; A writes what it computed from its stale read. A
// must be refused, and B's claim alone — before B writes — is enough.
func TestTableReadModifyWriteRace(t *testing.T) {
	t.Parallel()
	pool, items := setup(t)
	ctx := ctxFor(t, time.Minute)
	exec(t, pool, `UPDATE items SET stock = 1 WHERE id = 1`)

	var a, b int
	if err := items.Read(ctx, pool, 1, 5, []string{"stock"}, &a); err != nil {
		t.Fatal(err)
	}
	// A pauses. B claims by reading.
	if err := items.Read(ctx, pool, 1, 6, []string{"stock"}, &b); err != nil {
		t.Fatal(err)
	}
	stale(t, items.Update(ctx, pool, 1, 5, postgres.Set("stock", a-1)), 5, 6)
	if err := items.Update(ctx, pool, 1, 6, postgres.Set("stock", b-1)); err != nil {
		t.Fatal(err)
	}
	stale(t, items.Update(ctx, pool, 1, 5, postgres.Set("stock", a-1)), 5, 6)
	if stock, mark := row(t, pool, 1); stock != 0 || mark != 6 {
		t.Fatalf("row = stock %d mark %d, want 0 (one unit sold once) and 6", stock, mark)
	}
}

// A refusal decided on a row version committed after the statement's
// snapshot must still report a mark above the presented token; a row
// deleted that way is no row; a row deleted and re-created lower is
// written.
func TestTableRefusedAfterSnapshot(t *testing.T) {
	t.Parallel()
	type op struct {
		name string
		run  func(ctx context.Context, db postgres.DB, items *postgres.Table, tok token.Token) error
	}
	ops := []op{
		{"Update", func(ctx context.Context, db postgres.DB, items *postgres.Table, tok token.Token) error {
			return items.Update(ctx, db, 1, tok, postgres.Set("stock", 99))
		}},
		{"Read", func(ctx context.Context, db postgres.DB, items *postgres.Table, tok token.Token) error {
			var stock int
			return items.Read(ctx, db, 1, tok, []string{"stock"}, &stock)
		}},
		{"Upsert", func(ctx context.Context, db postgres.DB, items *postgres.Table, tok token.Token) error {
			return items.Upsert(ctx, db, 1, tok, postgres.Set("stock", 99))
		}},
		{"Delete", func(ctx context.Context, db postgres.DB, items *postgres.Table, tok token.Token) error {
			return items.Delete(ctx, db, 1, tok)
		}},
	}
	cases := []struct {
		name  string
		other string // what the concurrent transaction does to row 1 (mark 3)
		want  func(t *testing.T, op string, err error)
	}{
		{"raised", `UPDATE items SET fence_token = 7 WHERE id = 1`, func(t *testing.T, _ string, err error) { stale(t, err, 5, 7) }},
		{"deleted", `DELETE FROM items WHERE id = 1`, func(t *testing.T, op string, err error) {
			if op == "Upsert" { // no row and no tombstone (a plain DELETE): Upsert inserts
				if err != nil {
					t.Fatalf("got %v, want the row inserted", err)
				}
			} else if !errors.Is(err, postgres.ErrNoRow) {
				t.Fatalf("got %v, want ErrNoRow", err)
			}
		}},
		{"recreated lower", `DELETE FROM items WHERE id = 1; INSERT INTO items (id, stock, fence_token) VALUES (1, 1, 4)`, func(t *testing.T, _ string, err error) {
			if err != nil {
				t.Fatalf("got %v, want the access accepted (4 <= 5)", err)
			}
		}},
	}
	for _, o := range ops {
		for _, c := range cases {
			t.Run(o.name+"/"+c.name, func(t *testing.T) {
				pool, items := setup(t)
				ctx := ctxFor(t, time.Minute)
				exec(t, pool, `UPDATE items SET fence_token = 3 WHERE id = 1`)
				other, err := pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer other.Rollback(context.Background())
				for _, s := range []string{`SELECT FROM items WHERE id = 1 FOR UPDATE`, c.other} {
					if _, err := other.Exec(ctx, s); err != nil {
						t.Fatal(err)
					}
				}
				errc := make(chan error, 1)
				go func() { errc <- o.run(ctx, pool, items, 5) }()
				waitBlocked(t, pool, 1) // its snapshot sees mark 3
				if err := other.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				c.want(t, o.name, <-errc)
			})
		}
	}
}

// 16 writers with interleaved random tokens on one row. Every committed
// write must carry a token at least that of every write committed before
// it, the writes reported accepted must be exactly those committed, and
// the final row must be the last of the accepted writes in token order.
func TestTableConcurrentTokens(t *testing.T) {
	t.Parallel()
	pool, items := setup(t)
	exec(t, pool,
		`CREATE TABLE hist (seq bigserial PRIMARY KEY, token bigint NOT NULL, note text)`,
		`CREATE FUNCTION log_items() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.note IS DISTINCT FROM OLD.note THEN
		INSERT INTO hist (token, note) VALUES (NEW.fence_token, NEW.note);
	END IF;
	RETURN NULL;
END $$`,
		`CREATE TRIGGER log AFTER UPDATE ON items FOR EACH ROW EXECUTE FUNCTION log_items()`)
	hist := runWriters(t, func(ctx context.Context, tok token.Token, note string, rmw bool) error {
		if rmw {
			var stock int
			if err := items.Read(ctx, pool, 1, tok, []string{"stock"}, &stock); err != nil {
				return err
			}
			return items.Update(ctx, pool, 1, tok, postgres.Set("stock", stock+1), postgres.Set("note", note))
		}
		return items.Update(ctx, pool, 1, tok, postgres.Set("note", note))
	}, pool, `SELECT token, note FROM hist ORDER BY seq`)
	checkFinal(t, pool, hist)
}

// checkFinal checks item 1 against the replay of hist: the last write's
// note, and the stock incremented once per read-modify-write (none lost).
func checkFinal(t *testing.T, pool *pgxpool.Pool, hist []write) {
	t.Helper()
	var note string
	var stock int
	if err := pool.QueryRow(context.Background(), `SELECT note, stock FROM items WHERE id = 1`).Scan(&note, &stock); err != nil {
		t.Fatal(err)
	}
	rmw := 0
	for _, h := range hist {
		if strings.HasPrefix(h.note, "rmw ") {
			rmw++
		}
	}
	if last := hist[len(hist)-1]; note != last.note || stock != 10+rmw {
		t.Fatalf("final row note %q stock %d, want %q and %d (10 + one per accepted read-modify-write)", note, stock, last.note, 10+rmw)
	}
}

// interleaved returns the next tick of a shared clock, minus a random lag
// of up to 5: the token a holder that was slow to act would present.
func interleaved(clock *atomic.Int64) int {
	return max(1, int(clock.Add(1))-rand.N(6))
}

type write struct {
	tok  token.Token
	note string
}

// runWriters runs 16 goroutines calling writeFn with interleaved random
// tokens, unique to each writer (as a lock service issues them), half of
// them read-modify-writes. It checks the committed history (histSQL:
// token and note in commit order) against the writes reported accepted,
// and returns it.
func runWriters(t *testing.T, writeFn func(ctx context.Context, tok token.Token, note string, rmw bool) error, pool *pgxpool.Pool, histSQL string) []write {
	t.Helper()
	return runWritersN(t, 16, 40, writeFn, pool, histSQL)
}

// runWritersN is runWriters with writers goroutines of perWriter writes
// each.
func runWritersN(t *testing.T, writers, perWriter int, writeFn func(ctx context.Context, tok token.Token, note string, rmw bool) error, pool *pgxpool.Pool, histSQL string) []write {
	t.Helper()
	ctx := ctxFor(t, 3*time.Minute)
	var (
		clock    atomic.Int64
		mu       sync.Mutex
		accepted = map[string]token.Token{}
		refused  int
		maxTok   token.Token
		wg       sync.WaitGroup
	)
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				// Tokens climb with i and overlap across writers, so some
				// writers are always behind.
				tok := token.Token(interleaved(&clock)*writers + w)
				rmw := rand.N(2) == 0
				note := fmt.Sprintf("w%d-i%d-t%d", w, i, tok)
				if rmw {
					note = "rmw " + note
				}
				err := writeFn(ctx, tok, note, rmw)
				var se *token.StaleError
				mu.Lock()
				maxTok = max(maxTok, tok)
				switch {
				case err == nil:
					accepted[note] = tok
				case errors.As(err, &se):
					refused++
					if se.Current <= se.Presented || se.Presented != tok {
						t.Errorf("%s: StaleError %+v: current must be above presented", note, se)
					}
				default:
					t.Errorf("%s: %v", note, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	rows, err := pool.Query(ctx, histSQL)
	if err != nil {
		t.Fatal(err)
	}
	hist, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (write, error) {
		var w write
		var tok int64
		err := r.Scan(&tok, &w.note)
		w.tok = token.Token(tok)
		return w, err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d writes accepted, %d refused as stale", len(accepted), refused)
	if len(accepted) < 10 || refused < 10 {
		t.Fatalf("%d accepted, %d refused: the test did not exercise the fence", len(accepted), refused)
	}
	if len(hist) != len(accepted) {
		t.Fatalf("%d writes committed, %d reported accepted", len(hist), len(accepted))
	}
	for i, h := range hist {
		if tok, ok := accepted[h.note]; !ok || tok != h.tok {
			t.Fatalf("committed write %q (token %d) was not reported accepted", h.note, h.tok)
		}
		if i > 0 && h.tok < hist[i-1].tok {
			t.Fatalf("write %d committed with token %d after %q with %d", i, h.tok, hist[i-1].note, hist[i-1].tok)
		}
	}
	// Commit order is token order, so replaying the accepted writes in
	// token order (stable: commit order among equal tokens) is the history.
	replay := slices.Clone(hist)
	slices.SortStableFunc(replay, func(a, b write) int { return int(a.tok) - int(b.tok) })
	if !slices.Equal(replay, hist) {
		t.Fatal("replaying the accepted writes in token order differs from the history")
	}
	return hist
}

// A deleted row's mark survives as a tombstone: a stale holder cannot
// re-create the row, a newer one can.
func TestTableDeleteLeavesTombstone(t *testing.T) {
	t.Parallel()
	pool, items := setup(t)
	ctx := ctxFor(t, time.Minute)
	if err := items.Update(ctx, pool, 1, 5, postgres.Set("stock", 3)); err != nil {
		t.Fatal(err)
	}
	stale(t, items.Delete(ctx, pool, 1, 4), 4, 5)
	before := dump(t, pool, "items", "fence_tokens")
	if err := items.Delete(ctx, pool, 2, 9); !errors.Is(err, postgres.ErrNoRow) {
		t.Fatalf("Delete of a missing row = %v, want ErrNoRow", err)
	}
	if after := dump(t, pool, "items", "fence_tokens"); after != before {
		t.Fatalf("Delete of a missing row wrote:\n%s\nwas\n%s", after, before)
	}
	if err := items.Delete(ctx, pool, 1, 10); err != nil {
		t.Fatal(err)
	}
	if err := items.Update(ctx, pool, 1, 11, postgres.Set("stock", 1)); !errors.Is(err, postgres.ErrNoRow) {
		t.Fatalf("Update of a deleted row = %v, want ErrNoRow", err)
	}
	// The holder of token 7 (it read before the delete) re-creates the row.
	err := items.Upsert(ctx, pool, 1, 7, postgres.Set("stock", 2))
	stale(t, err, 7, 10)
	var se *token.StaleError
	if errors.As(err, &se); se.Resource != "items/1" {
		t.Fatalf("StaleError.Resource = %q", se.Resource)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM items WHERE id = 1`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("a stale Upsert re-created the row (count %d, %v)", n, err)
	}
	var tomb int64
	if err := pool.QueryRow(ctx, `SELECT token FROM fence_tokens WHERE resource = 'items/1'`).Scan(&tomb); err != nil || tomb != 10 {
		t.Fatalf("tombstone = %d, %v; want 10", tomb, err)
	}
	// The deleting holder itself, and newer ones, may re-create it.
	if err := items.Upsert(ctx, pool, 1, 10, postgres.Set("stock", 2)); err != nil {
		t.Fatal(err)
	}
	if err := items.Upsert(ctx, pool, 1, 12, postgres.Set("stock", 4), postgres.Set("note", "back")); err != nil {
		t.Fatal(err)
	}
	stale(t, items.Upsert(ctx, pool, 1, 11, postgres.Set("stock", 0)), 11, 12)
	if stock, mark := row(t, pool, 1); stock != 4 || mark != 12 {
		t.Fatalf("row = stock %d mark %d, want 4 and 12", stock, mark)
	}
	// A fresh key: Upsert inserts, with defaults for columns not set.
	if err := items.Upsert(ctx, pool, 3, 1); err != nil {
		t.Fatal(err)
	}
	if stock, mark := row(t, pool, 3); stock != 0 || mark != 1 {
		t.Fatalf("inserted row = stock %d mark %d, want 0 and 1", stock, mark)
	}
}

// Deletes, re-creations, updates and reads of one key from 16 goroutines.
// A trigger logs every insert, update and delete (a delete with its
// tombstone) in commit order: the tokens must never go down, and the row
// must exist at the end exactly when the last entry is not a delete.
func TestTableDeleteResurrectRace(t *testing.T) {
	t.Parallel()
	pool, items := setup(t)
	ctx := ctxFor(t, 3*time.Minute)
	exec(t, pool,
		`CREATE TABLE hist (seq bigserial PRIMARY KEY, op text NOT NULL, token bigint NOT NULL, note text)`,
		`CREATE FUNCTION log_items() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'DELETE' THEN
		INSERT INTO hist (op, token) SELECT 'D', token FROM fence_tokens WHERE resource = 'items/' || OLD.id;
	ELSIF TG_OP = 'INSERT' THEN
		INSERT INTO hist (op, token, note) VALUES ('I', NEW.fence_token, NEW.note);
	ELSIF NEW.note IS DISTINCT FROM OLD.note THEN
		INSERT INTO hist (op, token, note) VALUES ('U', NEW.fence_token, NEW.note);
	ELSE
		INSERT INTO hist (op, token, note) VALUES ('R', NEW.fence_token, NEW.note);
	END IF;
	RETURN NULL;
END $$`,
		`CREATE TRIGGER log AFTER INSERT OR UPDATE OR DELETE ON items FOR EACH ROW EXECUTE FUNCTION log_items()`)

	const workers, perWorker = 16, 40
	var (
		clock          atomic.Int64
		mu             sync.Mutex
		writes         = map[string]token.Token{} // accepted Upsert/Update by note
		deletes, stale int
		wg             sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				tok := token.Token(interleaved(&clock))
				note := fmt.Sprintf("w%d-i%d-t%d", w, i, tok)
				var err error
				kind := rand.N(4)
				switch kind {
				case 0:
					err = items.Delete(ctx, pool, 1, tok)
				case 1:
					err = items.Upsert(ctx, pool, 1, tok, postgres.Set("note", note))
				case 2:
					err = items.Update(ctx, pool, 1, tok, postgres.Set("note", note))
				default:
					err = items.Read(ctx, pool, 1, tok, nil)
				}
				var se *token.StaleError
				mu.Lock()
				switch {
				case err == nil && kind == 0:
					deletes++
				case err == nil && kind < 3:
					writes[note] = tok
				case err == nil, errors.Is(err, postgres.ErrNoRow):
				case errors.As(err, &se):
					stale++
					if se.Current <= tok {
						t.Errorf("%s: StaleError %+v", note, se)
					}
				default:
					t.Errorf("%s: %v", note, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	rows, err := pool.Query(ctx, `SELECT op, token, coalesce(note, '') FROM hist ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	type entry struct {
		Op   string
		Tok  int64
		Note string
	}
	hist, err := pgx.CollectRows(rows, pgx.RowToStructByPos[entry])
	if err != nil {
		t.Fatal(err)
	}
	var nd, nw int
	for i, h := range hist {
		if i > 0 && h.Tok < hist[i-1].Tok {
			t.Fatalf("history entry %d (%s %d) follows %s %d: a lower token got in", i, h.Op, h.Tok, hist[i-1].Op, hist[i-1].Tok)
		}
		switch h.Op {
		case "D":
			nd++
		case "I", "U":
			nw++
			if tok, ok := writes[h.Note]; !ok || int64(tok) != h.Tok {
				t.Fatalf("committed %s %q (token %d) was not reported accepted", h.Op, h.Note, h.Tok)
			}
		}
	}
	t.Logf("%d history entries: %d deletes, %d writes; %d refused as stale", len(hist), nd, nw, stale)
	if nd != deletes || nw != len(writes) {
		t.Fatalf("committed %d deletes and %d writes, reported %d and %d", nd, nw, deletes, len(writes))
	}
	if deletes < 3 || stale < 10 {
		t.Fatalf("%d deletes, %d stale: the test did not exercise re-creation", deletes, stale)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM items WHERE id = 1`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if exists := hist[len(hist)-1].Op != "D"; exists != (n == 1) {
		t.Fatalf("row count %d, but the last history entry is %+v", n, hist[len(hist)-1])
	}
}

// Keys of other types, and names that need quoting.
func TestTableKeyTypesAndQuoting(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxFor(t, time.Minute)
	marks, err := postgres.NewTokens(postgres.TokensOptions{Name: pgx.Identifier{"Fencing; drop", `marks "x"`}})
	if err != nil {
		t.Fatal(err)
	}
	if err := marks.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	exec(t, pool,
		`CREATE SCHEMA "Inv"`,
		`CREATE TABLE "Inv"."My ""Items""" ("Id" uuid PRIMARY KEY, "select" text, "Fence Token" bigint NOT NULL DEFAULT 0)`,
		`CREATE TABLE skus (sku text PRIMARY KEY, qty int, fence_token bigint NOT NULL DEFAULT 0)`)
	uuidItems := newTable(t, postgres.TableOptions{Name: pgx.Identifier{"Inv", `My "Items"`}, Key: "Id", Token: "Fence Token", Tokens: marks})
	skus := newTable(t, postgres.TableOptions{Name: pgx.Identifier{"skus"}, Key: "sku", Tokens: marks})

	id := "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
	if err := uuidItems.Upsert(ctx, pool, id, 3, postgres.Set("select", "'; DROP TABLE skus; --")); err != nil {
		t.Fatal(err)
	}
	var sel string
	if err := uuidItems.Read(ctx, pool, id, 3, []string{"select"}, &sel); err != nil || sel != "'; DROP TABLE skus; --" {
		t.Fatalf("Read = %q, %v", sel, err)
	}
	if err := uuidItems.Delete(ctx, pool, id, 4); err != nil {
		t.Fatal(err)
	}
	err = uuidItems.Upsert(ctx, pool, id, 3)
	stale(t, err, 3, 4)
	var se *token.StaleError
	if errors.As(err, &se); se.Resource != `Inv.My "Items"/`+id {
		t.Fatalf("StaleError.Resource = %q", se.Resource)
	}

	if err := skus.Upsert(ctx, pool, "A-1", 2, postgres.Set("qty", 5)); err != nil {
		t.Fatal(err)
	}
	if err := skus.Update(ctx, pool, "A-1", 2, postgres.Set("qty", 4)); err != nil {
		t.Fatal(err)
	}
	var qty int
	if err := skus.Read(ctx, pool, "A-1", 2, []string{"qty"}, &qty); err != nil || qty != 4 {
		t.Fatalf("Read = %d, %v", qty, err)
	}
	// Tables named like the aliases inside the statements.
	for _, name := range []string{"u", "c", "cur", "m", "r", "fenceguard"} {
		exec(t, pool, `CREATE TABLE `+pgx.Identifier{name}.Sanitize()+` (id int PRIMARY KEY, r int, fence_token bigint NOT NULL DEFAULT 0)`)
		tb := newTable(t, postgres.TableOptions{Name: pgx.Identifier{name}, Key: "id", Tokens: marks})
		var r int
		for i, err := range []error{
			tb.Upsert(ctx, pool, 1, 2, postgres.Set("r", 1)),
			tb.Upsert(ctx, pool, 1, 2, postgres.Set("r", 2)),
			tb.Update(ctx, pool, 1, 3, postgres.Set("r", 3)),
			tb.Read(ctx, pool, 1, 3, []string{"r"}, &r),
			tb.Delete(ctx, pool, 1, 4),
		} {
			if err != nil {
				t.Fatalf("table %s, step %d: %v", name, i, err)
			}
		}
		if r != 3 {
			t.Fatalf("table %s: read %d, want 3", name, r)
		}
		stale(t, tb.Upsert(ctx, pool, 1, 3), 3, 4)
		exec(t, pool, `DELETE FROM "Fencing; drop"."marks ""x""" WHERE resource = '`+name+`/1'`)
	}

	var tombs []string
	rows, err := pool.Query(ctx, `SELECT resource FROM "Fencing; drop"."marks ""x""" WHERE resource <> '' ORDER BY 1`)
	if err == nil {
		tombs, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{`Inv.My "Items"/` + id, "skus/A-1"}; !slices.Equal(tombs, want) {
		t.Fatalf("tombstones %q, want %q", tombs, want)
	}
}

// Column mode on one connection and inside a transaction.
func TestTableOnConnAndTx(t *testing.T) {
	t.Parallel()
	pool, items := setup(t)
	ctx := ctxFor(t, time.Minute)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if err := items.Update(ctx, conn.Conn(), 1, 2, postgres.Set("stock", 8)); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := items.Upsert(ctx, tx, 1, 3, postgres.Set("stock", 7)); err != nil {
		t.Fatal(err)
	}
	if err := items.Upsert(ctx, tx, 2, 3, postgres.Set("stock", 1)); err != nil {
		t.Fatal(err)
	}
	stale(t, items.Update(ctx, tx, 1, 2, postgres.Set("stock", 0)), 2, 3)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if stock, mark := row(t, pool, 1); stock != 8 || mark != 2 {
		t.Fatalf("after rollback: stock %d mark %d, want 8 and 2", stock, mark)
	}
}

// The token comes from the context when none is passed, and the context
// carries it for the row's lock key (enforce.Resolve's rule): the row's
// resource name by default, TableOptions.LockKey's mapping when set. A
// token of another lock is refused as missing, naming both keys, and
// moves nothing.
func TestTableTokenFromContext(t *testing.T) {
	t.Parallel()
	pool, items := setup(t)
	ctx := ctxFor(t, time.Minute)
	if err := items.Update(token.NewContext(ctx, "items/1", 6), pool, 1, 0, postgres.Set("stock", 5)); err != nil {
		t.Fatal(err)
	}
	if _, mark := row(t, pool, 1); mark != 6 {
		t.Fatalf("mark %d, want the context's 6", mark)
	}
	// Another lock's token: refused, the row untouched.
	err := items.Update(token.NewContext(ctx, "sku:1", 7), pool, 1, 0, postgres.Set("stock", 4))
	if !errors.Is(err, token.ErrMissing) || !strings.Contains(err.Error(), `the context carries the token of lock "sku:1", and the lock key here is "items/1"`) {
		t.Fatalf("Update with sku:1's token in the context = %v, want ErrMissing naming items/1 and sku:1", err)
	}
	if stock, mark := row(t, pool, 1); stock != 5 || mark != 6 {
		t.Fatalf("after the refusal: stock %d mark %d, want 5 and 6", stock, mark)
	}
	// With LockKey, rows map to their locks' keys.
	skus, err := postgres.NewTable(postgres.TableOptions{
		Name: pgx.Identifier{"items"}, Key: "id", Check: token.NoCheck(),
		LockKey: postgres.LockKeyPrefix("sku:"),
	})
	if err != nil {
		t.Fatal(err)
	}
	sku1 := token.NewContext(ctx, "sku:1", 7)
	if err := skus.Update(sku1, pool, 1, 0, postgres.Set("stock", 4)); err != nil {
		t.Fatal(err)
	}
	if _, mark := row(t, pool, 1); mark != 7 {
		t.Fatalf("mark %d, want the context's 7", mark)
	}
	if err := skus.Update(sku1, pool, 2, 0, postgres.Set("stock", 4)); !errors.Is(err, token.ErrMissing) || !strings.Contains(fmt.Sprint(err), `the lock key here is "sku:2"`) {
		t.Fatalf("row 2 under sku:1's token = %v, want ErrMissing naming sku:2", err)
	}
	// An explicit token wins over the context's.
	stale(t, skus.Update(sku1, pool, 1, 5, postgres.Set("stock", 4)), 5, 7)
}

// A backend killed in the middle of Delete — tombstone written, row lock
// awaited — leaves neither the tombstone nor the delete behind.
func TestTableKilledBackend(t *testing.T) {
	t.Parallel()
	pool, items := setup(t)
	ctx := ctxFor(t, time.Minute)
	if err := items.Update(ctx, pool, 1, 4, postgres.Set("stock", 3)); err != nil {
		t.Fatal(err)
	}
	before := dump(t, pool, "items", "fence_tokens")
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.Background())
	if _, err := holder.Exec(ctx, `SELECT FROM items WHERE id = 1 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- items.Delete(ctx, pool, 1, 9) }()
	pids := waitBlocked(t, pool, 1)
	if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pids[0]); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err == nil {
		t.Fatal("Delete on a killed backend returned nil")
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if after := dump(t, pool, "items", "fence_tokens"); after != before {
		t.Fatalf("a killed Delete left a partial write:\n%s\nwas\n%s", after, before)
	}
}

func TestAddTokenColumn(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxFor(t, time.Minute)
	exec(t, pool,
		`CREATE TABLE legacy (id int PRIMARY KEY, v text)`,
		`INSERT INTO legacy VALUES (1, 'a'), (2, 'b')`,
		`CREATE TABLE wrong (id int PRIMARY KEY, fence_token int)`)
	legacy := newTable(t, postgres.TableOptions{Name: pgx.Identifier{"legacy"}, Key: "id"})
	for range 2 { // idempotent
		if err := legacy.AddTokenColumn(ctx, pool); err != nil {
			t.Fatal(err)
		}
	}
	var marks []int64
	rows, err := pool.Query(ctx, `SELECT fence_token FROM legacy ORDER BY id`)
	if err == nil {
		marks, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	}
	if err != nil || !slices.Equal(marks, []int64{0, 0}) {
		t.Fatalf("marks %v, %v; want 0 0", marks, err)
	}
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := legacy.Update(ctx, pool, 1, 1, postgres.Set("v", "b")); err != nil {
		t.Fatal(err)
	}

	wrong := newTable(t, postgres.TableOptions{Name: pgx.Identifier{"wrong"}, Key: "id"})
	var se *postgres.SchemaError
	if err := wrong.AddTokenColumn(ctx, pool); !errors.As(err, &se) || !errors.Is(err, postgres.ErrSchema) {
		t.Fatalf("AddTokenColumn over an int column = %v, want a SchemaError", err)
	}
	missing := newTable(t, postgres.TableOptions{Name: pgx.Identifier{"nope"}, Key: "id"})
	if err := missing.AddTokenColumn(ctx, pool); !errors.Is(err, postgres.ErrSchema) {
		t.Fatalf("AddTokenColumn on a missing table = %v, want ErrSchema", err)
	}
}

func TestNewTableOptions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		o    postgres.TableOptions
	}{
		{"no name", postgres.TableOptions{Key: "id"}},
		{"three-part name", postgres.TableOptions{Name: pgx.Identifier{"db", "s", "t"}, Key: "id"}},
		{"empty name part", postgres.TableOptions{Name: pgx.Identifier{"", "t"}, Key: "id"}},
		{"NUL in name", postgres.TableOptions{Name: pgx.Identifier{"it\x00ems"}, Key: "id"}},
		{"no key", postgres.TableOptions{Name: pgx.Identifier{"t"}}},
		{"NUL in key", postgres.TableOptions{Name: pgx.Identifier{"t"}, Key: "i\x00d"}},
		{"key is the token column", postgres.TableOptions{Name: pgx.Identifier{"t"}, Key: "fence_token"}},
	} {
		if _, err := postgres.NewTable(c.o); err == nil {
			t.Errorf("%s: NewTable accepted the options", c.name)
		}
	}
	if _, err := postgres.NewTokens(postgres.TokensOptions{Name: pgx.Identifier{"a", "b", "c"}}); err == nil {
		t.Errorf("NewTokens accepted a name of three parts")
	}
}
