package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// accounts returns a migrated database with accounts a, b and c (balance
// 100 each), whose marks in fence_tokens are those of the resources
// "acct:a", "acct:b" and "acct:c".
func accounts(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool := newPool(t)
	if err := postgres.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	exec(t, pool,
		`CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL)`,
		`INSERT INTO accounts VALUES ('a', 100), ('b', 100), ('c', 100)`)
	return pool
}

// transfer moves amount from one account to another inside tx.
func transfer(ctx context.Context, tx pgx.Tx, from, to string, amount int64) error {
	if _, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance - $2 WHERE id = $1`, from, amount); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance + $2 WHERE id = $1`, to, amount)
	return err
}

// staleFor checks that err is the StaleError of resource.
func staleFor(t testing.TB, err error, resource string, presented, current token.Token) {
	t.Helper()
	stale(t, err, presented, current)
	var se *token.StaleError
	if errors.As(err, &se); se.Resource != resource {
		t.Fatalf("StaleError.Resource = %q, want %q", se.Resource, resource)
	}
}

// The ways TxAll runs fn: the claims before fn, with fn's first statement
// (ClaimWithFirstStatement), and inside the caller's transaction.
type txAllMode struct {
	name  string
	lazy  bool
	txAll func(ctx context.Context, db postgres.DB, claims map[string]token.Token, fn func(pgx.Tx) error) error
}

func txAllModes(t *testing.T) []txAllMode {
	lazy, err := postgres.NewTokens(postgres.TokensOptions{ClaimWithFirstStatement: true})
	if err != nil {
		t.Fatal(err)
	}
	return []txAllMode{
		{"eager", false, func(ctx context.Context, db postgres.DB, c map[string]token.Token, fn func(pgx.Tx) error) error {
			return postgres.TxAll(ctx, db, c, fn)
		}},
		{"lazy", true, func(ctx context.Context, db postgres.DB, c map[string]token.Token, fn func(pgx.Tx) error) error {
			return lazy.TxAll(ctx, db, c, fn)
		}},
		{"nested", false, func(ctx context.Context, db postgres.DB, c map[string]token.Token, fn func(pgx.Tx) error) error {
			return pgx.BeginFunc(ctx, db, func(outer pgx.Tx) error {
				err := postgres.TxAll(ctx, outer, c, fn)
				if err != nil {
					// The savepoint is gone, and the caller's
					// transaction still works.
					if _, serr := outer.Exec(ctx, `SELECT 1`); serr != nil {
						t.Errorf("the caller's transaction after a refusal: %v", serr)
					}
				}
				return err
			})
		}},
	}
}

// A transfer claims both accounts and commits; when any token is stale,
// no mark moves, fn's work never commits (eager and nested: fn does not
// even run; lazy: its first statement fails), and the error is the
// StaleError of the first refused resource in sorted order — also when
// that resource has no mark and its token is below the floor of pruned
// marks.
func TestTxAllAllOrNothing(t *testing.T) {
	t.Parallel()
	for _, m := range txAllModes(t) {
		t.Run(m.name, func(t *testing.T) {
			pool := accounts(t)
			ctx := ctxFor(t, time.Minute)
			move := func(from, to string) func(pgx.Tx) error {
				return func(tx pgx.Tx) error { return transfer(ctx, tx, from, to, 10) }
			}
			if err := m.txAll(ctx, pool, map[string]token.Token{"acct:a": 5, "acct:b": 5}, move("a", "b")); err != nil {
				t.Fatal(err)
			}
			if err := m.txAll(ctx, pool, map[string]token.Token{"acct:a": 5, "acct:b": 6, "acct:c": 2}, move("b", "c")); err != nil {
				t.Fatalf("equal and higher tokens: %v", err)
			}
			// Marks: a 5, b 6, c 2. Balances: 90, 100, 110.
			exec(t, pool, `UPDATE fence_tokens SET token = 9 WHERE resource = 'acct:c'`)
			before := dump(t, pool, "accounts", "fence_tokens")

			refusals := []struct {
				name     string
				claims   map[string]token.Token
				resource string
				t, cur   token.Token
			}{
				// b is stale; a and c would advance.
				{"middle stale", map[string]token.Token{"acct:a": 7, "acct:b": 5, "acct:c": 9}, "acct:b", 5, 6},
				// b and c are stale: b comes first.
				{"two stale", map[string]token.Token{"acct:a": 7, "acct:b": 1, "acct:c": 8}, "acct:b", 1, 6},
				// Only the last one is stale.
				{"last stale", map[string]token.Token{"acct:a": 7, "acct:b": 7, "acct:c": 8}, "acct:c", 8, 9},
			}
			for _, r := range refusals {
				ran, wrote := false, false
				err := m.txAll(ctx, pool, r.claims, func(tx pgx.Tx) error {
					ran = true
					err := transfer(ctx, tx, "a", "c", 1)
					wrote = err == nil
					return err
				})
				staleFor(t, err, r.resource, r.t, r.cur)
				if ran && !m.lazy {
					t.Fatalf("%s: fn ran although a claim was refused: claim, then act", r.name)
				}
				if wrote {
					t.Fatalf("%s: fn's statement ran under a refused claim", r.name)
				}
				if got := dump(t, pool, "accounts", "fence_tokens"); got != before {
					t.Fatalf("%s: a refusal moved something:\nbefore %s\nafter  %s", r.name, before, got)
				}
			}

			// Without a statement, the lazy claims go out on their own.
			err := m.txAll(ctx, pool, map[string]token.Token{"acct:a": 7, "acct:b": 5}, func(pgx.Tx) error { return nil })
			staleFor(t, err, "acct:b", 5, 6)
			if got := dump(t, pool, "accounts", "fence_tokens"); got != before {
				t.Fatalf("a refusal without a statement moved something:\nbefore %s\nafter  %s", before, got)
			}

			// A resource without a mark is compared with the floor.
			exec(t, pool, `UPDATE fence_tokens SET token = 50 WHERE resource = ''`)
			err = m.txAll(ctx, pool, map[string]token.Token{"acct:a": 60, "acct:new": 40}, move("a", "b"))
			staleFor(t, err, "acct:new", 40, 50)
			if got := dump(t, pool, "accounts", "fence_tokens"); got != before {
				t.Fatalf("a refusal by the floor moved something:\nbefore %s\nafter  %s", before, got)
			}
			if err := m.txAll(ctx, pool, map[string]token.Token{"acct:a": 60, "acct:new": 60}, move("a", "b")); err != nil {
				t.Fatal(err)
			}
			if hw := highWater(t, pool, "acct:new"); hw != 60 {
				t.Fatalf("acct:new at %d, want 60", hw)
			}
		})
	}
}

// A claim of a key whose mark a Prune deletes while the claim waits for
// the row: the floor's trigger refuses the key, Prune having raised the
// floor in the same commit, and the refusal names it with the floor as
// the current mark; the other key's claim is undone with it.
func TestTxAllPruneRacingClaim(t *testing.T) {
	t.Parallel()
	for _, m := range txAllModes(t) {
		t.Run(m.name, func(t *testing.T) {
			pool := accounts(t)
			ctx := ctxFor(t, time.Minute)
			if err := postgres.NewFence(pool).Claim(ctx, "acct:a", 40); err != nil {
				t.Fatal(err)
			}
			if err := postgres.NewFence(pool).Claim(ctx, "acct:b", 100); err != nil {
				t.Fatal(err)
			}
			age(t, pool, "acct:b") // only b is pruned
			tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			if n, err := postgres.Prune(ctx, tx, time.Hour); err != nil || n != 1 {
				t.Fatalf("Prune = %d, %v", n, err)
			}
			errc := make(chan error, 1)
			go func() {
				errc <- m.txAll(ctx, pool, map[string]token.Token{"acct:a": 50, "acct:b": 50}, func(tx pgx.Tx) error {
					return transfer(ctx, tx, "a", "b", 1)
				})
			}()
			waitBlocked(t, pool, 1)
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			staleFor(t, <-errc, "acct:b", 50, 100)
			if n, hw := rows(t, pool), highWater(t, pool, "acct:a"); n != 1 || hw != 40 {
				t.Fatalf("after the refused TxAll: %d marks, acct:a at %d; want acct:a's alone, at 40", n, hw)
			}
		})
	}
}

// A refusal decided on a mark committed after the claim's snapshot
// reports that mark, and names the resource it refused.
func TestTxAllRefusedAfterSnapshot(t *testing.T) {
	t.Parallel()
	for _, m := range txAllModes(t) {
		t.Run(m.name, func(t *testing.T) {
			pool := accounts(t)
			ctx := ctxFor(t, time.Minute)
			if err := postgres.TxAll(ctx, pool, map[string]token.Token{"acct:a": 3, "acct:b": 3}, func(pgx.Tx) error { return nil }); err != nil {
				t.Fatal(err)
			}
			other, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Rollback(context.Background())
			if _, err := other.Exec(ctx, `UPDATE fence_tokens SET token = 7 WHERE resource = 'acct:b'`); err != nil {
				t.Fatal(err)
			}
			errc := make(chan error, 1)
			go func() {
				errc <- m.txAll(ctx, pool, map[string]token.Token{"acct:a": 5, "acct:b": 5}, func(tx pgx.Tx) error {
					return transfer(ctx, tx, "a", "b", 1)
				})
			}()
			waitBlocked(t, pool, 1)
			if err := other.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			staleFor(t, <-errc, "acct:b", 5, 7)
			if hw := highWater(t, pool, "acct:a"); hw != 3 {
				t.Fatalf("acct:a moved to %d by a refused TxAll", hw)
			}
		})
	}
}

// Transactions over overlapping sets of resources, each built in its own
// order, never deadlock: the claims lock the marks in one sorted order.
// Each transaction then reads and rewrites every balance of its set, so a
// lost update would show that two of them overlapped.
func TestTxAllCanonicalOrder(t *testing.T) {
	t.Parallel()
	pool := accounts(t)
	lazy, err := postgres.NewTokens(postgres.TokensOptions{ClaimWithFirstStatement: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, 5*time.Minute)
	const rounds = 1000
	sets := [][]string{{"a", "b"}, {"b", "a"}, {"c", "b", "a"}}
	start := time.Now()
	var wg sync.WaitGroup
	for g, set := range sets {
		wg.Go(func() {
			for i := range rounds {
				claims := map[string]token.Token{}
				for _, id := range set {
					claims["acct:"+id] = 5
				}
				fn := func(tx pgx.Tx) error {
					for _, id := range set {
						var b int64
						if err := tx.QueryRow(ctx, `SELECT balance FROM accounts WHERE id = $1`, id).Scan(&b); err != nil {
							return err
						}
						if _, err := tx.Exec(ctx, `UPDATE accounts SET balance = $2 WHERE id = $1`, id, b+1); err != nil {
							return err
						}
					}
					return nil
				}
				var err error
				if (g+i)%2 == 0 {
					err = postgres.TxAll(ctx, pool, claims, fn)
				} else {
					err = lazy.TxAll(ctx, pool, claims, fn)
				}
				if err != nil {
					var pgErr *pgconn.PgError
					if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
						t.Errorf("set %v, round %d: deadlock: %v", set, i, err)
					} else {
						t.Errorf("set %v, round %d: %v", set, i, err)
					}
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	t.Logf("%d transactions over overlapping sets in %v", rounds*len(sets), took)
	if took > 3*time.Minute {
		t.Fatalf("%d transactions took %v", rounds*len(sets), took)
	}
	want := map[string]int64{"a": 100 + 3*rounds, "b": 100 + 3*rounds, "c": 100 + rounds}
	for id, w := range want {
		var b int64
		if err := pool.QueryRow(ctx, `SELECT balance FROM accounts WHERE id = $1`, id).Scan(&b); err != nil {
			t.Fatal(err)
		}
		if b != w {
			t.Errorf("balance of %s = %d, want %d: transactions over one resource overlapped", id, b, w)
		}
	}
}

// Zero tokens are taken, resource by resource, from a context that
// carries several locks' tokens; a resource whose token the context does
// not carry is refused with ErrMissing, and nothing is sent.
func TestTxAllFromContext(t *testing.T) {
	t.Parallel()
	pool := accounts(t)
	ctx := ctxFor(t, time.Minute)
	held := token.NewContext(token.NewContext(ctx, "acct:a", 6), "acct:b", 7)
	if err := postgres.TxAll(held, pool, map[string]token.Token{"acct:a": 0, "acct:b": 0, "acct:c": 4}, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for r, want := range map[string]token.Token{"acct:a": 6, "acct:b": 7, "acct:c": 4} {
		if hw := highWater(t, pool, r); hw != want {
			t.Errorf("%s at %d, want %d", r, hw, want)
		}
	}
	before := dump(t, pool, "fence_tokens")
	db := &countingDB{DB: pool}
	err := postgres.TxAll(held, db, map[string]token.Token{"acct:a": 0, "acct:c": 0}, func(pgx.Tx) error { return nil })
	if !errors.Is(err, token.ErrMissing) {
		t.Fatalf("a resource the context has no token for = %v, want ErrMissing", err)
	}
	if n := db.calls.Load(); n != 0 || dump(t, pool, "fence_tokens") != before {
		t.Fatalf("a refused TxAll sent %d calls or moved a mark", n)
	}
}

// A forged token among honest ones is refused before anything is sent:
// no mark moves, fn does not run.
func TestTxAllForgedMovesNothing(t *testing.T) {
	t.Parallel()
	pool := accounts(t)
	ctx := ctxFor(t, time.Minute)
	if err := postgres.TxAll(ctx, pool, map[string]token.Token{"acct:a": 5, "acct:b": 5}, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	before := dump(t, pool, "accounts", "fence_tokens")
	for _, m := range txAllModes(t) {
		db := &countingDB{DB: pool}
		ran := false
		err := m.txAll(ctx, db, map[string]token.Token{"acct:a": 6, "acct:b": 1 << 62, "acct:c": 6}, func(pgx.Tx) error {
			ran = true
			return nil
		})
		var fe *token.ForgedError
		if !errors.As(err, &fe) || !errors.Is(err, token.ErrForged) || fe.Resource != "acct:b" {
			t.Fatalf("%s: forged token = %v, want the ForgedError of acct:b", m.name, err)
		}
		sent := db.calls.Load()
		if m.name == "nested" {
			sent-- // the caller's BEGIN
		}
		if ran || sent != 0 {
			t.Fatalf("%s: fn ran (%v) or %d calls were sent for a forged token", m.name, ran, sent)
		}
		if got := dump(t, pool, "accounts", "fence_tokens"); got != before {
			t.Fatalf("%s: a forged token moved something:\nbefore %s\nafter  %s", m.name, before, got)
		}
	}
	if err := postgres.TxAll(ctx, pool, map[string]token.Token{"acct:a": 6, "acct:b": 6}, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatalf("honest holders after the forged one: %v", err)
	}
}

// Sets larger than the statement texts a Tokens keeps are claimed all the
// same, and refused all the same.
func TestTxAllManyResources(t *testing.T) {
	t.Parallel()
	pool := accounts(t)
	ctx := ctxFor(t, time.Minute)
	claims := map[string]token.Token{}
	for i := range 200 {
		claims[fmt.Sprint("acct:", i)] = 5
	}
	if err := postgres.TxAll(ctx, pool, claims, func(tx pgx.Tx) error { return transfer(ctx, tx, "a", "b", 1) }); err != nil {
		t.Fatal(err)
	}
	if n := rows(t, pool); n != 200 {
		t.Fatalf("%d marks, want 200", n)
	}
	exec(t, pool, `UPDATE fence_tokens SET token = 9 WHERE resource = 'acct:150'`)
	before := dump(t, pool, "accounts", "fence_tokens")
	for r := range claims {
		claims[r] = 6
	}
	err := postgres.TxAll(ctx, pool, claims, func(tx pgx.Tx) error { return transfer(ctx, tx, "a", "b", 1) })
	staleFor(t, err, "acct:150", 6, 9)
	if got := dump(t, pool, "accounts", "fence_tokens"); got != before {
		t.Fatalf("a refusal moved something")
	}
}

// Arguments no call could succeed with: typed errors, nothing sent.
func TestTxAllBadInput(t *testing.T) {
	t.Parallel()
	pool := accounts(t)
	ctx := ctxFor(t, time.Minute)
	unchecked, err := postgres.NewTokens(postgres.TokensOptions{Check: token.NoCheck(), Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	db := &countingDB{DB: pool}
	nop := func(pgx.Tx) error { return nil }
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for _, c := range []struct {
		name string
		err  error
		want []error
	}{
		// Nothing to claim.
		{"nil claims", postgres.TxAll(ctx, db, nil, nop), []error{token.ErrNoResource, postgres.ErrBadInput}},
		{"no claims", postgres.TxAll(ctx, db, map[string]token.Token{}, nop), []error{token.ErrNoResource, postgres.ErrBadInput}},
		// An empty resource is not filled in from the context.
		{"empty resource", postgres.TxAll(token.NewContext(ctx, "acct:a", 5), db, map[string]token.Token{"": 5, "acct:b": 5}, nop), []error{token.ErrNoResource}},
		// A zero token with none in the context.
		{"zero token", postgres.TxAll(ctx, db, map[string]token.Token{"acct:a": 5, "acct:b": 0}, nop), []error{token.ErrMissing}},
		// A token a bigint cannot hold.
		{"above bigint", unchecked.TxAll(ctx, db, map[string]token.Token{"acct:a": 5, "acct:b": math.MaxUint64}, nop), []error{token.ErrInvalid}},
		{"nil DB", postgres.TxAll(ctx, nil, map[string]token.Token{"acct:a": 5}, nop), []error{postgres.ErrBadInput}},
		{"nil fn", postgres.TxAll(ctx, db, map[string]token.Token{"acct:a": 5}, nil), []error{postgres.ErrBadInput}},
		{"cancelled", postgres.TxAll(cancelled, db, map[string]token.Token{"acct:a": 5}, nop), []error{context.Canceled}},
	} {
		for _, w := range c.want {
			if !errors.Is(c.err, w) {
				t.Errorf("%s: %v, want %v", c.name, c.err, w)
			}
		}
	}
	tooMany := map[string]token.Token{}
	for i := range 40000 {
		tooMany[fmt.Sprint("acct:", i)] = 5
	}
	if err := postgres.TxAll(ctx, db, tooMany, nop); !errors.Is(err, postgres.ErrBadInput) {
		t.Errorf("40,000 resources: %v, want ErrBadInput", err)
	}
	var re *token.RangeError
	if err := unchecked.TxAll(ctx, db, map[string]token.Token{"acct:b": math.MaxUint64}, nop); !errors.As(err, &re) {
		t.Errorf("above bigint: %v, want a RangeError", err)
	}
	if n := db.calls.Load(); n != 0 {
		t.Fatalf("bad input sent %d calls", n)
	}
	if n := rows(t, pool); n != 0 {
		t.Fatalf("bad input left %d marks", n)
	}
}

// The hold bound follows the lease of the context's token when it is one
// of the claims': a transaction outlasting its lease is refused at commit,
// one whose lease ended before the claim sends nothing, and the server's
// idle bound is the lease's.
func TestTxAllLeaseBound(t *testing.T) {
	t.Parallel()
	for _, m := range txAllModes(t)[:2] {
		t.Run(m.name, func(t *testing.T) {
			pool := accounts(t)
			ctx := ctxFor(t, time.Minute)
			const lease = time.Second
			end := time.Now().Add(lease)
			fixed := leaseCtx(ctx, "acct:a", 5, func() time.Time { return end })
			var idle string
			err := m.txAll(fixed, pool, map[string]token.Token{"acct:a": 0, "acct:b": 7}, func(tx pgx.Tx) error {
				if err := transfer(ctx, tx, "a", "b", 10); err != nil {
					return err
				}
				if err := tx.QueryRow(ctx, `SHOW idle_in_transaction_session_timeout`).Scan(&idle); err != nil {
					return err
				}
				time.Sleep(lease + 100*time.Millisecond)
				return nil
			})
			if !errors.Is(err, postgres.ErrHoldExpired) {
				t.Fatalf("fn outlasting its lease: %v, want ErrHoldExpired", err)
			}
			if d, perr := time.ParseDuration(idle); perr != nil || d <= 0 || d > lease {
				t.Errorf("idle bound inside %q, want the lease's time left (at most %v)", idle, lease)
			}
			var b int64
			if err := pool.QueryRow(ctx, `SELECT balance FROM accounts WHERE id = 'a'`).Scan(&b); err != nil || b != 100 {
				t.Fatalf("balance of a = %d (%v): a transaction past its lease committed", b, err)
			}
			if n := rows(t, pool); n != 0 {
				t.Fatalf("%d marks left by a transaction past its lease", n)
			}

			gone := leaseCtx(ctx, "acct:a", 5, func() time.Time { return time.Now().Add(-time.Millisecond) })
			db := &countingDB{DB: pool}
			err = m.txAll(gone, db, map[string]token.Token{"acct:a": 0, "acct:b": 7}, func(tx pgx.Tx) error {
				return transfer(ctx, tx, "a", "b", 10)
			})
			if !errors.Is(err, postgres.ErrHoldExpired) {
				t.Fatalf("a lease ended before the claim: %v, want ErrHoldExpired", err)
			}
			if n := db.calls.Load(); n != 0 || rows(t, pool) != 0 {
				t.Fatalf("a lease ended before the claim sent %d calls or left marks", n)
			}

			// The context of a critical section over a and c (c
			// innermost), whose first lease has ended: a transaction on a
			// alone follows it too.
			both := token.WithExpiry(token.NewContext(token.NewContext(ctx, "acct:a", 5), "acct:c", 8),
				func() time.Time { return time.Now().Add(-time.Millisecond) })
			err = m.txAll(both, db, map[string]token.Token{"acct:a": 0}, func(tx pgx.Tx) error {
				return transfer(ctx, tx, "a", "b", 10)
			})
			if !errors.Is(err, postgres.ErrHoldExpired) {
				t.Fatalf("a's token in a context whose first lease ended: %v, want ErrHoldExpired", err)
			}
			if n := db.calls.Load(); n != 0 || rows(t, pool) != 0 {
				t.Fatalf("a lease ended before the claim sent %d calls or left marks", n)
			}
		})
	}
}

// Under REPEATABLE READ and SERIALIZABLE, claims that waited for a holder
// of one of their resources who then committed are retried before fn
// runs, as Tx's are, and fn sees that holder's write.
func TestTxAllIsolationWaitsForCommit(t *testing.T) {
	t.Parallel()
	for _, level := range isolationLevels {
		for _, lazy := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, ClaimWithFirstStatement %v", level, lazy), func(t *testing.T) {
				pool, _ := isoSetup(t, level)
				ctx := ctxFor(t, time.Minute)
				marks, err := postgres.NewTokens(postgres.TokensOptions{ClaimWithFirstStatement: lazy})
				if err != nil {
					t.Fatal(err)
				}
				if err := marks.TxAll(ctx, pool, map[string]token.Token{"sku:0": 1, "sku:1": 1, "sku:2": 1}, func(pgx.Tx) error { return nil }); err != nil {
					t.Fatal(err)
				}
				inside, release := make(chan struct{}), make(chan struct{})
				errA := make(chan error, 1)
				go func() {
					errA <- marks.TxAll(ctx, pool, map[string]token.Token{"sku:1": 5, "sku:2": 5}, func(tx pgx.Tx) error {
						if _, err := tx.Exec(ctx, `UPDATE items SET stock = 4 WHERE id = 1`); err != nil {
							return err
						}
						close(inside)
						<-release
						return nil
					})
				}()
				<-inside
				errB := make(chan error, 1)
				var seen int
				go func() {
					errB <- marks.TxAll(ctx, pool, map[string]token.Token{"sku:0": 6, "sku:1": 6}, func(tx pgx.Tx) error {
						return tx.QueryRow(ctx, `SELECT stock FROM items WHERE id = 1`).Scan(&seen)
					})
				}()
				waitBlocked(t, pool, 1)
				close(release)
				if err := <-errA; err != nil {
					t.Fatal(err)
				}
				if err := <-errB; err != nil {
					t.Fatalf("the waiting holder: %v", err)
				}
				if seen != 4 {
					t.Fatalf("the waiting holder read stock %d, want the first holder's 4", seen)
				}
			})
		}
	}
}
