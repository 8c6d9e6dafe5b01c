package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// A transfer is a read-modify-write of two accounts in two steps — read
// both balances, then write both computed from what was read — each
// account locked for a short lease that nothing renews. Some holders pause
// past their leases between the read and the write, as a holder frozen by
// a GC pause would, so that another holder locks the same accounts and
// transfers meanwhile. Unfenced, the paused holder's write overwrites that
// transfer and money appears or vanishes; fenced with TxAll over both
// accounts (each step claims them with their tokens), the paused holder's
// write is refused as stale and the total stays put.
func TestTxAllTransfersWithPausedHolders(t *testing.T) {
	const (
		accounts = 6
		initial  = 1000
		workers  = 6
		rounds   = 25
		ttl      = 150 * time.Millisecond
	)
	run := func(t *testing.T, fenced bool) (total int64, refused, paused int64) {
		pool := pgPool(t, nil)
		mustExec(t, pool, `CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL)`)
		mustExec(t, pool, `INSERT INTO accounts SELECT i, $1 FROM generate_series(0, $2) i`, initial, accounts-1)
		locker := memlock.New()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var nRefused, nPaused atomic.Int64
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), 7))
				for i := range rounds {
					from, to := rng.IntN(accounts), rng.IntN(accounts-1)
					if to >= from {
						to++
					}
					pause := i%4 == w%4 // a quarter of the transfers
					err := transferTwoSteps(ctx, pool, locker, fenced, from, to, 1+rng.Int64N(50), ttl, pause)
					switch {
					case pause && err == nil:
						nPaused.Add(1)
					case errors.Is(err, token.ErrStale):
						nRefused.Add(1)
					case err != nil:
						t.Errorf("transfer %d→%d: %v", from, to, err)
						return
					}
				}
			})
		}
		wg.Wait()
		if err := pool.QueryRow(ctx, `SELECT sum(balance) FROM accounts`).Scan(&total); err != nil {
			t.Fatal(err)
		}
		return total, nRefused.Load(), nPaused.Load()
	}

	t.Run("fenced", func(t *testing.T) {
		total, refused, paused := run(t, true)
		t.Logf("total %d (want %d), %d transfers refused as stale, %d paused ones went through", total, accounts*initial, refused, paused)
		if total != accounts*initial {
			t.Fatalf("total %d, want %d: a stale holder's write went through", total, accounts*initial)
		}
		if refused == 0 {
			t.Fatalf("no transfer was refused: the pauses never overlapped another holder, so this run checked nothing")
		}
	})
	// The control: the same schedule without fencing must lose or make
	// money, or the fenced run proves nothing.
	t.Run("unfenced control", func(t *testing.T) {
		for attempt := 1; ; attempt++ {
			total, _, _ := run(t, false)
			t.Logf("attempt %d: total %d (want %d)", attempt, total, accounts*initial)
			if total != accounts*initial {
				return
			}
			if attempt == 3 {
				t.Fatalf("three unfenced runs kept the total: the schedule does not overlap holders")
			}
		}
	})
}

// transferTwoSteps locks both accounts (in order, each with a lease of
// ttl that nothing renews), reads both balances, pauses past the leases if
// pause, then writes both balances computed from the read, and releases.
// Fenced, both steps are TxAll over both accounts with their tokens.
func transferTwoSteps(ctx context.Context, pool *pgxpool.Pool, locker locks.Locker, fenced bool, from, to int, amount int64, ttl time.Duration, pause bool) error {
	ids := []int{from, to}
	sort.Ints(ids)
	claims := map[string]token.Token{}
	for _, id := range ids {
		key := fmt.Sprint("acct:", id)
		l, err := locker.Acquire(ctx, key, ttl)
		if err != nil {
			return err
		}
		defer func() { _ = l.Release(context.WithoutCancel(ctx)) }()
		claims[key] = l.Token()
	}
	step := func(fn func(pgx.Tx) error) error {
		if fenced {
			return postgres.TxAll(ctx, pool, claims, fn)
		}
		return pgx.BeginFunc(ctx, pool, fn)
	}
	var fromBal, toBal int64
	err := step(func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT balance FROM accounts WHERE id = $1`, from).Scan(&fromBal); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT balance FROM accounts WHERE id = $1`, to).Scan(&toBal)
	})
	if err != nil {
		return err
	}
	if pause {
		time.Sleep(3 * ttl)
	}
	balance := map[int]int64{from: fromBal - amount, to: toBal + amount}
	return step(func(tx pgx.Tx) error {
		for _, id := range ids { // in order: unfenced, the rows' own locks must not deadlock
			if _, err := tx.Exec(ctx, `UPDATE accounts SET balance = $2 WHERE id = $1`, id, balance[id]); err != nil {
				return err
			}
		}
		return nil
	})
}
