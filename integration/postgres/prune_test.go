package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/harness/pgserver"
	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

type env struct {
	pool  *pgxpool.Pool
	rr    *pgxpool.Pool // default_transaction_isolation = repeatable read
	toks  *postgres.Tokens
	items *postgres.Table
}

func setup(t *testing.T) *env {
	t.Helper()
	pg := pgserver.Shared(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	cfg, err := pgxpool.ParseConfig(pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "repeatable read"
	rr, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rr.Close)
	toks, err := postgres.NewTokens(postgres.TokensOptions{Check: token.NoCheck()})
	if err != nil {
		t.Fatal(err)
	}
	if err := toks.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE items (id bigint PRIMARY KEY, stock int NOT NULL, fence_token bigint NOT NULL DEFAULT 0)`); err != nil {
		t.Fatal(err)
	}
	items, err := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id", Tokens: toks, Check: token.NoCheck()})
	if err != nil {
		t.Fatal(err)
	}
	return &env{pool: pool, rr: rr, toks: toks, items: items}
}

// monotone records, per key, the highest token whose acceptance has
// completed; an acceptance of a token below the value read before the call
// started is a stale write.
type monotone struct {
	mu  sync.Mutex
	max map[string]token.Token
}

func (m *monotone) before(k string) token.Token {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.max[k]
}

func (m *monotone) accepted(k string, tk token.Token) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if tk > m.max[k] {
		m.max[k] = tk
	}
}

func isStale(err error) bool {
	var se *token.StaleError
	return errors.As(err, &se)
}

// checkStale verifies a StaleError's Current is above Presented.
func checkStale(t *testing.T, err error) {
	var se *token.StaleError
	if errors.As(err, &se) && se.Current <= se.Presented {
		t.Errorf("StaleError with Current %d <= Presented %d: %v", se.Current, se.Presented, err)
	}
}

// TestPruneRaceClaims races Prune (olderThan 1µs: everything idle) against
// Fence.Claim, Tx and lazy Tx of old and new tokens, on READ COMMITTED and
// REPEATABLE READ pools.
func TestPruneRaceClaims(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	lazy, err := postgres.NewTokens(postgres.TokensOptions{Check: token.NoCheck(), ClaimWithFirstStatement: true})
	if err != nil {
		t.Fatal(err)
	}
	const keys = 4
	var mono = &monotone{max: map[string]token.Token{}}
	var next atomic.Int64
	next.Store(100)
	var accepted, refused, stale, other, pruned atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, err := e.toks.Prune(ctx, e.pool, time.Microsecond)
			if err != nil {
				t.Errorf("prune: %v", err)
				return
			}
			pruned.Add(n)
		}
	}()
	deadline := time.Now().Add(6 * time.Second)
	var cw sync.WaitGroup
	for g := range 6 {
		cw.Add(1)
		go func() {
			defer cw.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for time.Now().Before(deadline) {
				k := fmt.Sprintf("k%d", r.IntN(keys))
				floor := mono.before(k)
				var tk token.Token
				if r.IntN(2) == 0 {
					tk = token.Token(next.Add(1)) // newer
				} else {
					tk = token.Token(max(1, int64(floor)-int64(r.IntN(5)))) // old or equal
				}
				db := e.pool
				if g%2 == 1 {
					db = e.rr
				}
				var err error
				ran := false
				switch r.IntN(3) {
				case 0:
					err = e.toks.Fence(db).Claim(ctx, k, tk)
				case 1:
					err = e.toks.Tx(ctx, db, k, tk, func(tx pgx.Tx) error {
						ran = true
						_, err := tx.Exec(ctx, `SELECT 1`)
						return err
					})
				case 2:
					err = lazy.Tx(ctx, db, k, tk, func(tx pgx.Tx) error {
						_, err := tx.Exec(ctx, `SELECT 1`)
						if err == nil {
							ran = true
						}
						return err
					})
				}
				_ = ran
				switch {
				case err == nil:
					accepted.Add(1)
					if tk < floor {
						t.Errorf("STALE ACCEPTED: %s token %d accepted after %d was accepted", k, tk, floor)
					}
					mono.accepted(k, tk)
				case isStale(err):
					refused.Add(1)
					checkStale(t, err)
					if tk >= floor {
						stale.Add(1) // a token not below any completed acceptance was refused: floor (liveness) or a concurrent newer one
					}
				default:
					other.Add(1)
					t.Logf("other error: %v", err)
				}
			}
		}()
	}
	cw.Wait()
	close(stop)
	wg.Wait()
	t.Logf("accepted %d, refused %d (of which token >= completed max: %d), other %d, marks pruned %d",
		accepted.Load(), refused.Load(), stale.Load(), other.Load(), pruned.Load())
	if other.Load() > 0 {
		t.Errorf("%d unexpected errors", other.Load())
	}
	for k := range keys {
		key := fmt.Sprintf("k%d", k)
		hw, err := e.toks.HighWater(ctx, e.pool, key)
		if err != nil {
			t.Fatal(err)
		}
		if m := mono.before(key); hw < m {
			t.Errorf("HighWater(%s) = %d below accepted %d", key, hw, m)
		}
	}
}

// TestPruneTxHolding: a Tx holds its mark while Prune runs; Prune skips it,
// and after commit an older token is still refused; after a prune the floor
// refuses old tokens of every key, HighWater reports it, Reset lowers one.
func TestPruneTxHolding(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	f := e.toks.Fence(e.pool)
	if err := f.Claim(ctx, "a", 500); err != nil {
		t.Fatal(err)
	}
	if err := f.Claim(ctx, "b", 300); err != nil {
		t.Fatal(err)
	}
	var n int64
	err := e.toks.Tx(ctx, e.pool, "a", 600, func(tx pgx.Tx) error {
		var err error
		n, err = e.toks.Prune(ctx, e.pool, time.Microsecond)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("prune while a held: deleted %d, want 1 (b)", n)
	}
	for _, c := range []struct {
		k  string
		tk token.Token
	}{{"a", 599}, {"b", 299}, {"b", 1}, {"fresh", 299}} {
		if err := f.Claim(ctx, c.k, c.tk); !isStale(err) {
			t.Errorf("claim %s %d after prune: %v, want stale", c.k, c.tk, err)
		}
		if err := e.toks.Tx(ctx, e.rr, c.k, c.tk, func(pgx.Tx) error { t.Errorf("fn ran for %s %d", c.k, c.tk); return nil }); !isStale(err) {
			t.Errorf("RR Tx %s %d after prune: %v, want stale", c.k, c.tk, err)
		}
	}
	hw, err := e.toks.HighWater(ctx, e.pool, "b")
	if err != nil || hw != 300 {
		t.Errorf("HighWater(b) after prune = %d, %v; want 300 (the floor)", hw, err)
	}
	// Prune again: a (600) goes, floor 600.
	if _, err := e.toks.Prune(ctx, e.pool, time.Microsecond); err != nil {
		t.Fatal(err)
	}
	if fl, _ := e.toks.Floor(ctx, e.pool); fl != 600 {
		t.Errorf("floor = %d, want 600", fl)
	}
	if err := f.Claim(ctx, "b", 599); !isStale(err) {
		t.Errorf("b 599 after floor 600: %v", err)
	}
	// Reset b below the floor: the operator's call.
	if _, err := e.toks.Reset(ctx, e.pool, "b", 10); err != nil {
		t.Fatal(err)
	}
	if err := f.Claim(ctx, "b", 11); err != nil {
		t.Errorf("b 11 after reset to 10: %v", err)
	}
	if err := f.Claim(ctx, "c", 11); !isStale(err) {
		t.Errorf("c 11 (no row, floor 600) after reset of b: %v", err)
	}
	// Reset must not leave the floor trigger's exemption on for the pool's session.
	if err := f.Claim(ctx, "d", 12); !isStale(err) {
		t.Errorf("d 12 after reset: %v", err)
	}
}
