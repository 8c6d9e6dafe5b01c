package postgres_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// auditLog collects the records of a logger as JSON objects.
type auditLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (a *auditLog) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.buf.Write(p)
}

func (a *auditLog) logger() *slog.Logger { return slog.New(slog.NewJSONHandler(a, nil)) }

// records returns the records so far as "level store resource from to",
// and forgets them.
func (a *auditLog) records(t *testing.T) []string {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	dec := json.NewDecoder(&a.buf)
	for dec.More() {
		var r struct{ Level, Msg, Store, Resource, From, To string }
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r.Level+" "+r.Store+" "+r.Resource+" "+r.From+" "+r.To)
	}
	a.buf.Reset()
	return out
}

// dumpExcept is dump without the rows that match the condition, to show
// that a reset moved nothing but what it names.
func dumpExcept(t *testing.T, pool *pgxpool.Pool, table, cond string) string {
	t.Helper()
	var s string
	q := `SELECT coalesce(string_agg(r::text, ' ' ORDER BY r::text), '') FROM ` + table + ` r WHERE NOT (` + cond + `) AND to_jsonb(r)->>'resource' IS DISTINCT FROM ''`
	if err := pool.QueryRow(context.Background(), q).Scan(&s); err != nil {
		t.Fatalf("dump %s: %v", table, err)
	}
	return s
}

// Two rows and two resources are poisoned by forged tokens (accepted: no
// check); resetting one of each by name lets honest holders in again
// there, and moves nothing else — every other row of both tables is as it
// was, the other poisoned row and resource included.
func TestReset(t *testing.T) {
	t.Parallel()
	const forged = token.Token(1) << 62
	pool, _ := setup(t)
	ctx := ctxFor(t, time.Minute)
	var audit auditLog
	open := newTable(t, postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id", Check: token.NoCheck()})
	items := newTable(t, postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id", Logger: audit.logger()})
	openMarks, err := postgres.NewTokens(postgres.TokensOptions{Check: token.NoCheck()})
	if err != nil {
		t.Fatal(err)
	}
	marks, err := postgres.NewTokens(postgres.TokensOptions{Logger: audit.logger()})
	if err != nil {
		t.Fatal(err)
	}
	exec(t, pool, `INSERT INTO items (id, stock) VALUES (2, 20), (3, 30)`)
	for _, step := range []error{
		open.Update(ctx, pool, 1, forged, postgres.Set("note", "forged")), // row 1: the row's mark
		open.Update(ctx, pool, 2, forged, postgres.Set("note", "forged")), // row 2: the same, left poisoned
		open.Read(ctx, pool, 3, 7, nil),                                   // row 3: honest
		open.Upsert(ctx, pool, 4, 5),                                      // key 4: deleted by a forger,
		open.Delete(ctx, pool, 4, forged),                                 // a poisoned tombstone
		open.Upsert(ctx, pool, 5, forged),                                 // key 5: row and tombstone
		openMarks.Fence(pool).Claim(ctx, "sku:1", forged),
		openMarks.Fence(pool).Claim(ctx, "sku:2", forged),
		postgres.NewFence(pool).Claim(ctx, "sku:3", 9),
	} {
		if step != nil {
			t.Fatal(step)
		}
	}
	stale(t, items.Update(ctx, pool, 1, 100, postgres.Set("stock", 1)), 100, forged)
	stale(t, items.Upsert(ctx, pool, 4, 100), 100, forged)
	stale(t, postgres.Tx(ctx, pool, "sku:1", 100, func(pgx.Tx) error { return nil }), 100, forged)

	// A row: its mark only (it has no tombstone).
	itemsBefore := dumpExcept(t, pool, "items", "id = 1")
	marksBefore := dump(t, pool, "fence_tokens")
	if prev, err := items.Reset(ctx, pool, 1, 100); err != nil || prev != forged {
		t.Fatalf("Reset(items 1, 100) = %d, %v; want %d", prev, err, forged)
	}
	if got, want := audit.records(t), []string{"WARN postgres items items/1 4611686018427387904 100"}; !slices.Equal(got, want) {
		t.Fatalf("audit records %q, want %q", got, want)
	}
	if stock, mark := row(t, pool, 1); stock != 10 || mark != 100 {
		t.Fatalf("row 1: stock %d mark %d, want 10 (untouched) and 100", stock, mark)
	}
	if dumpExcept(t, pool, "items", "id = 1") != itemsBefore || dump(t, pool, "fence_tokens") != marksBefore {
		t.Fatal("resetting row 1 moved something else")
	}
	if err := items.Update(ctx, pool, 1, 101, postgres.Set("stock", 1)); err != nil {
		t.Fatalf("an honest holder after the reset: %v", err)
	}
	stale(t, items.Update(ctx, pool, 1, 99, postgres.Set("stock", 1)), 99, 101)
	stale(t, items.Update(ctx, pool, 2, 101, postgres.Set("stock", 1)), 101, forged)

	// A deleted row: its tombstone; an honest holder may re-create it.
	itemsBefore = dump(t, pool, "items")
	marksBefore = dumpExcept(t, pool, "fence_tokens", "resource = 'items/4'")
	if prev, err := items.Reset(ctx, pool, 4, 50); err != nil || prev != forged {
		t.Fatalf("Reset(items 4, 50) = %d, %v; want %d", prev, err, forged)
	}
	if got, want := audit.records(t), []string{"WARN postgres fence_tokens items/4 4611686018427387904 50"}; !slices.Equal(got, want) {
		t.Fatalf("audit records %q, want %q", got, want)
	}
	if dump(t, pool, "items") != itemsBefore || dumpExcept(t, pool, "fence_tokens", "resource = 'items/4'") != marksBefore {
		t.Fatal("resetting key 4 moved something else")
	}
	stale(t, items.Upsert(ctx, pool, 4, 49), 49, 50)
	if err := items.Upsert(ctx, pool, 4, 60, postgres.Set("note", "back")); err != nil {
		t.Fatalf("re-creating key 4 after the reset: %v", err)
	}

	// A row whose tombstone is poisoned too (a forged Upsert inserted it):
	// both are reset, or its next Delete would bring the poison back.
	if prev, err := items.Reset(ctx, pool, 5, 70); err != nil || prev != forged {
		t.Fatalf("Reset(items 5, 70) = %d, %v; want %d", prev, err, forged)
	}
	if got, want := audit.records(t), []string{
		"WARN postgres items items/5 4611686018427387904 70",
		"WARN postgres fence_tokens items/5 4611686018427387904 70",
	}; !slices.Equal(got, want) {
		t.Fatalf("audit records %q, want %q", got, want)
	}
	if err := items.Delete(ctx, pool, 5, 80); err != nil {
		t.Fatal(err)
	}
	if err := items.Upsert(ctx, pool, 5, 85); err != nil {
		t.Fatalf("re-creating key 5 after a reset and an honest delete: %v", err)
	}

	// A resource of the high-water table, through Tokens and through the
	// Fence.
	itemsBefore = dump(t, pool, "items")
	marksBefore = dumpExcept(t, pool, "fence_tokens", "resource = 'sku:1'")
	if prev, err := marks.Reset(ctx, pool, "sku:1", 100); err != nil || prev != forged {
		t.Fatalf("Reset(sku:1, 100) = %d, %v; want %d", prev, err, forged)
	}
	if got, want := audit.records(t), []string{"WARN postgres fence_tokens sku:1 4611686018427387904 100"}; !slices.Equal(got, want) {
		t.Fatalf("audit records %q, want %q", got, want)
	}
	if dump(t, pool, "items") != itemsBefore || dumpExcept(t, pool, "fence_tokens", "resource = 'sku:1'") != marksBefore {
		t.Fatal("resetting sku:1 moved something else")
	}
	if err := postgres.Tx(ctx, pool, "sku:1", 100, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatalf("an honest holder after the reset: %v", err)
	}
	stale(t, postgres.NewFence(pool).Claim(ctx, "sku:2", 100), 100, forged)
	if prev, err := marks.Fence(pool).Reset(ctx, "sku:2", 100); err != nil || prev != forged {
		t.Fatalf("Fence.Reset(sku:2, 100) = %d, %v", prev, err)
	}
	if err := postgres.NewFence(pool).Claim(ctx, "sku:2", 100); err != nil {
		t.Fatal(err)
	}
	if hw := highWater(t, pool, "sku:3"); hw != 9 {
		t.Fatalf("sku:3 at %d, want 9", hw)
	}
	audit.records(t)

	// Refused resets write nothing and log nothing.
	before := dump(t, pool, "items", "fence_tokens")
	for name, err := range map[string]error{
		"Table.Reset to 0":          func() error { _, err := items.Reset(ctx, pool, 2, 0); return err }(),
		"Table.Reset of nothing":    func() error { _, err := items.Reset(ctx, pool, 99, 5); return err }(),
		"Tokens.Reset, no resource": func() error { _, err := marks.Reset(ctx, pool, "", 5); return err }(),
		"Fence.Reset to 0":          func() error { _, err := marks.Fence(pool).Reset(ctx, "sku:2", 0); return err }(),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if dump(t, pool, "items", "fence_tokens") != before {
		t.Fatal("a refused reset wrote")
	}
	if got := audit.records(t); len(got) != 0 {
		t.Fatalf("refused resets logged %q", got)
	}
}

// A reset is ordered with fenced transactions: it waits for the one that
// holds the resource, and the holder's commit does not undo it.
func TestResetWaitsForHolder(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	ctx := ctxFor(t, time.Minute)
	marks, err := postgres.NewTokens(postgres.TokensOptions{Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	inside, release := make(chan struct{}), make(chan struct{})
	errTx := make(chan error, 1)
	go func() {
		errTx <- marks.Tx(ctx, pool, "sku:1", 40, func(pgx.Tx) error {
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside
	errReset := make(chan error, 1)
	go func() {
		_, err := marks.Reset(ctx, pool, "sku:1", 30)
		errReset <- err
	}()
	waitBlocked(t, pool, 1)
	close(release)
	if err := <-errTx; err != nil {
		t.Fatal(err)
	}
	if err := <-errReset; err != nil {
		t.Fatal(err)
	}
	if hw := highWater(t, pool, "sku:1"); hw != 30 {
		t.Fatalf("high-water %d, want the reset's 30", hw)
	}
}
