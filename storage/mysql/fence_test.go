package mysql_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/storage/mysql"
	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/fencetest"
)

// The Fence keeps the contract of token.Fence over the whole uint64
// range, with and without the driver options that change what the server
// reports for an upsert (clientFoundRows) and how arguments travel
// (interpolateParams: text in the statement rather than a prepared
// statement's binary parameters), and under every isolation level
// (REPEATABLE READ is the default).
func TestFenceConformance(t *testing.T) {
	for _, params := range [][]string{
		nil,
		{"clientFoundRows", "true"},
		{"interpolateParams", "true"},
		{"isolation", "READ-COMMITTED"},
		{"isolation", "SERIALIZABLE"},
	} {
		name := "default"
		if params != nil {
			name = params[0] + "=" + params[1]
		}
		t.Run(name, func(t *testing.T) {
			fencetest.Run(t, func(t *testing.T, check token.Check) fencetest.Subject {
				db := newDB(t, params...)
				if err := mysql.Migrate(ctxFor(t, time.Minute), db); err != nil {
					t.Fatal(err)
				}
				marks, err := mysql.NewTokens(mysql.TokensOptions{Check: check, Logger: discard})
				if err != nil {
					t.Fatal(err)
				}
				f := marks.Fence(db)
				return fencetest.Subject{Fence: f, HighWater: f.HighWater} // BIGINT UNSIGNED: all of uint64
			})
		})
	}
}

// 16 goroutines claim one key with random tokens: every refusal reports
// a mark above the token, the mark a reader sees only rises, and it ends
// at the largest token accepted — which is the largest presented, since
// that one can never be refused.
func TestFenceRandomTokens(t *testing.T) {
	db := newDB(t)
	ctx := ctxFor(t, 2*time.Minute)
	if err := mysql.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	f := mysql.NewFence(db)
	const workers, perWorker = 16, 40
	var (
		mu          sync.Mutex
		maxAccepted token.Token
		maxSent     token.Token
		wg          sync.WaitGroup
		done        = make(chan struct{})
	)
	base := token.Token(time.Now().UnixMicro()) - 1_000_000 // under the default check's clock bound
	for range workers {
		wg.Go(func() {
			for range perWorker {
				tok := base + token.Token(rand.N(1000))
				err := f.Claim(ctx, "sku:1", tok)
				var se *token.StaleError
				switch {
				case err == nil:
					mu.Lock()
					maxAccepted = max(maxAccepted, tok)
					mu.Unlock()
				case errors.As(err, &se):
					if se.Current <= tok || se.Presented != tok || se.Resource != "sku:1" {
						t.Errorf("Claim(%d): StaleError %+v", tok, se)
					}
				default:
					t.Errorf("Claim(%d): %v", tok, err)
				}
				mu.Lock()
				maxSent = max(maxSent, tok)
				mu.Unlock()
			}
		})
	}
	var readers sync.WaitGroup
	readers.Go(func() {
		var last token.Token
		for {
			select {
			case <-done:
				return
			default:
			}
			hw, err := f.HighWater(ctx, "sku:1")
			if err != nil {
				t.Errorf("HighWater: %v", err)
				return
			}
			if hw < last {
				t.Errorf("the mark went down from %d to %d", last, hw)
			}
			last = hw
		}
	})
	wg.Wait()
	close(done)
	readers.Wait()
	hw, err := f.HighWater(ctx, "sku:1")
	if err != nil {
		t.Fatal(err)
	}
	if hw != maxAccepted || hw != maxSent {
		t.Fatalf("final mark %d, want the largest accepted %d (largest presented %d)", hw, maxAccepted, maxSent)
	}
}

// Two transactions claiming two resources in opposite orders deadlock;
// the victim gets ErrDeadlock, never a stale refusal, and the other
// transaction's claims go through.
func TestFenceDeadlockIsNotStale(t *testing.T) {
	db := newDB(t)
	ctx := ctxFor(t, time.Minute)
	if err := mysql.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	marks, _ := mysql.NewTokens(mysql.TokensOptions{Check: token.NoCheck()})
	for _, r := range []string{"a", "b"} {
		if err := marks.Fence(db).Claim(ctx, r, 1); err != nil {
			t.Fatal(err)
		}
	}
	tx1, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback()
	tx2, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback()
	f1, f2 := marks.Fence(tx1), marks.Fence(tx2)
	if err := f1.Claim(ctx, "a", 10); err != nil {
		t.Fatal(err)
	}
	if err := f2.Claim(ctx, "b", 20); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	go func() { errs <- f1.Claim(ctx, "b", 10) }() // waits for tx2's row lock
	harness.Eventually(t, 30*time.Second, func() error {
		var waiting int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM information_schema.innodb_trx WHERE trx_state = 'LOCK WAIT'").Scan(&waiting); err != nil {
			return err
		}
		if waiting == 0 {
			return errors.New("tx1's claim of b is not waiting for tx2's lock yet")
		}
		return nil
	})
	errs <- f2.Claim(ctx, "a", 20)
	e1, e2 := <-errs, <-errs
	deadlocks := 0
	for _, err := range []error{e1, e2} {
		switch {
		case errors.Is(err, mysql.ErrDeadlock):
			deadlocks++
			if errors.Is(err, token.ErrStale) {
				t.Errorf("a deadlock reported as stale: %v", err)
			}
		case err != nil && !errors.Is(err, token.ErrStale):
			t.Errorf("claim: %v, want nil, stale or ErrDeadlock", err)
		}
	}
	if deadlocks != 1 {
		t.Fatalf("claims returned %v and %v; want exactly one ErrDeadlock", e1, e2)
	}
}

// The server reports the mark it found in the statement's own OK packet:
// a LAST_INSERT_ID() the session set before (by a refused claim, or by the
// caller) is not taken for a mark when the claim inserts the row.
func TestFenceSessionLastInsertID(t *testing.T) {
	db := newDB(t)
	ctx := ctxFor(t, time.Minute)
	if err := mysql.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	marks, _ := mysql.NewTokens(mysql.TokensOptions{Check: token.NoCheck()})
	f := marks.Fence(conn)
	if err := f.Claim(ctx, "a", 50); err != nil {
		t.Fatal(err)
	}
	stale(t, f.Claim(ctx, "a", 40), 40, 50) // LAST_INSERT_ID() is now 50
	if err := f.Claim(ctx, "b", 7); err != nil {
		t.Fatalf("first claim of b after a refusal on the same session: %v", err)
	}
	exec(t, conn, "DO LAST_INSERT_ID(999)")
	if err := f.Claim(ctx, "c", 3); err != nil {
		t.Fatalf("first claim of c after LAST_INSERT_ID(999): %v", err)
	}
	if err := f.Claim(ctx, "c", 3); err != nil {
		t.Fatalf("second claim of c with the same token: %v", err)
	}
}

// Inside the caller's transaction the claim's row lock is held until the
// transaction ends, a refusal moves nothing, and a rollback undoes the
// claim.
func TestFenceInTx(t *testing.T) {
	db := newDB(t)
	ctx := ctxFor(t, time.Minute)
	if err := mysql.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	f := mysql.NewFence(db)
	now := token.Token(time.Now().UnixMicro())
	if err := f.Claim(ctx, "r", now); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := mysql.NewFence(tx).Claim(ctx, "r", now+5); err != nil {
		t.Fatal(err)
	}
	stale(t, mysql.NewFence(tx).Claim(ctx, "r", now+1), now+1, now+5)
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if hw, err := f.HighWater(ctx, "r"); err != nil || hw != now {
		t.Fatalf("after the rollback: mark %d, %v; want %d", hw, err, now)
	}
}

// Input no claim could succeed with is refused before anything is sent.
func TestFenceBadInput(t *testing.T) {
	db := newDB(t)
	ctx := ctxFor(t, time.Minute)
	if err := mysql.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	marks, _ := mysql.NewTokens(mysql.TokensOptions{Check: token.NoCheck()})
	f := marks.Fence(db)
	long := strings.Repeat("k", mysql.MaxResourceLen)
	// A key the table holds exactly is fine.
	if err := f.Claim(ctx, long, 5); err != nil {
		t.Fatalf("Claim of a %d-byte key: %v", len(long), err)
	}
	for name, call := range map[string]func() error{
		// One byte more: a server not in strict mode would cut it to the
		// key above and the two would share a mark.
		"key too long": func() error { return f.Claim(ctx, long+"x", 9) },
		"nil DB":       func() error { return marks.Fence(nil).Claim(ctx, "k", 9) },
		"reset of a key too long": func() error {
			_, err := f.Reset(ctx, long+"x", 9)
			return err
		},
		"high-water of a key too long": func() error {
			_, err := f.HighWater(ctx, long+"x")
			return err
		},
	} {
		if err := call(); !errors.Is(err, mysql.ErrBadInput) {
			t.Errorf("%s: %v, want ErrBadInput", name, err)
		}
	}
	if hw, err := f.HighWater(ctx, long); err != nil || hw != 5 {
		t.Errorf("mark of the longest key: %d, %v; want 5", hw, err)
	}
	for _, name := range [][]string{{}, {"a", "b", "c"}, {""}, {strings.Repeat("t", 65)}, {"t "}, {"a\x00b"}} {
		if _, err := mysql.NewTokens(mysql.TokensOptions{Name: name}); !errors.Is(err, mysql.ErrBadInput) {
			t.Errorf("NewTokens(Name %q) = %v, want ErrBadInput", name, err)
		}
	}
}

// A Fence on a high-water table of another name, in another database; a
// missing table is a SchemaError that says to migrate.
func TestFenceOtherTable(t *testing.T) {
	db := newDB(t)
	ctx := ctxFor(t, time.Minute)
	// Unique across test processes sharing a server from the environment.
	other := "fg_other_" + strings.ReplaceAll(harness.UniqueID(), "-", "_")
	exec(t, db, "CREATE DATABASE "+other)
	t.Cleanup(func() { db.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+other) })
	marks, err := mysql.NewTokens(mysql.TokensOptions{Name: []string{other, "odd `name"}, Check: token.NoCheck()})
	if err != nil {
		t.Fatal(err)
	}
	f := marks.Fence(db)
	var se *mysql.SchemaError
	if err := f.Claim(ctx, "r", 3); !errors.As(err, &se) || !errors.Is(err, mysql.ErrSchema) || !strings.Contains(se.Fix, "Migrate") {
		t.Fatalf("Claim before Migrate = %v, want a SchemaError saying to migrate", err)
	}
	if err := marks.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := f.Claim(ctx, "r", 3); err != nil {
		t.Fatal(err)
	}
	stale(t, f.Claim(ctx, "r", 2), 2, 3)
	if hw, err := marks.HighWater(ctx, db, "r"); err != nil || hw != 3 {
		t.Fatalf("HighWater = %d, %v", hw, err)
	}
	// The default table does not exist here.
	if err := mysql.NewFence(db).Claim(ctx, "r", token.Token(time.Now().UnixMicro())); !errors.Is(err, mysql.ErrSchema) {
		t.Fatalf("Claim without fence_tokens = %v, want ErrSchema", err)
	}
	if _, err := f.Reset(ctx, "r", math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	stale(t, f.Claim(ctx, "r", math.MaxUint64-1), math.MaxUint64-1, math.MaxUint64)
}
