package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// The transfer workload: two accounts, A and B, whose total is conserved,
// moved between by read-modify-write transactions in a critical section
// over both locks (guard.DoAll), fenced by storage/postgres TxAll — or, in
// the control, by a plain transaction. The lock keys and the resources
// TxAll claims are the same names, one per account.

const (
	transferTTL     = 2 * time.Second // every holder's lease: etcd's minimum, the others' too
	transferOpening = 100             // each account's opening balance
)

// transferKeys are the lock keys and the resources: "acct:" + account.
var transferKeys = []string{"acct:A", "acct:B"}

// transferResult is how a holder's transfer ended.
type transferResult struct {
	Committed bool   `json:"committed"`         // the commit returned success
	Refusal   string `json:"refusal,omitempty"` // otherwise: "stale", "hold-expired", "unknown" (commit outcome unknown) or "error"
	Err       string `json:"err,omitempty"`
}

func (r transferResult) String() string {
	if r.Committed {
		return "committed"
	}
	return "refused (" + r.Refusal + "): " + r.Err
}

func transferOutcome(err error) transferResult {
	if err == nil {
		return transferResult{Committed: true}
	}
	r := transferResult{Refusal: "error", Err: strings.ReplaceAll(err.Error(), "\n", " ")}
	var stale *token.StaleError
	switch {
	case errors.As(err, &stale):
		r.Refusal = "stale"
	case errors.Is(err, postgres.ErrHoldExpired):
		r.Refusal = "hold-expired"
	case errors.Is(err, postgres.ErrCommitUnknown):
		r.Refusal = "unknown"
	}
	return r
}

// createAccounts creates the accounts table with A and B at the opening
// balance.
func createAccounts(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, `CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL)`); err != nil {
		return err
	}
	_, err := pool.Exec(ctx, `INSERT INTO accounts VALUES ('A', $1), ('B', $1)`, transferOpening)
	return err
}

// runTransfer moves amount from account from to account to in one
// transaction and commits: fenced, in a TxAll that claims every resource
// of tokens; otherwise in a plain transaction. The move is a
// read-modify-write: both balances are read, between is called with them
// (nil: nothing), and the balances computed from that read are written —
// safe only under a claim on both accounts that lasts until the commit.
func runTransfer(ctx context.Context, pool *pgxpool.Pool, fenced bool, tokens map[string]token.Token, from, to string, amount int64, between func(from, to int64) error) error {
	move := func(tx pgx.Tx) error {
		var f, t int64
		if err := tx.QueryRow(ctx, `SELECT balance FROM accounts WHERE id = $1`, from).Scan(&f); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT balance FROM accounts WHERE id = $1`, to).Scan(&t); err != nil {
			return err
		}
		if between != nil {
			if err := between(f, t); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE accounts SET balance = $2 WHERE id = $1`, from, f-amount); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE accounts SET balance = $2 WHERE id = $1`, to, t+amount)
		return err
	}
	if fenced {
		return postgres.TxAll(ctx, pool, tokens, move)
	}
	return pgx.BeginFunc(ctx, pool, move)
}

// transferHolderMain is the frozen holder of the transfer workload: under
// guard.DoAll over both accounts it moves 10 from A to B, and between its
// read and its write it says "read <A> <B> <token of acct:A> <token of
// acct:B>" and waits for a line on stdin — frozen there by the test, past
// its lease. Then it says "result <transferResult as JSON>".
//
// It writes whatever its guard believes once it is continued: a holder can
// be paused after its last look at its lease, so only the resource's check
// may stop it. Its transaction therefore runs on a context the lease's loss
// does not cancel, carrying the tokens and the lease's end all the same.
func transferHolderMain(cfg attackChildConfig) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, closeLock, err := openLocker(ctx, cfg.Lock, log)
	if err != nil {
		fmt.Println("error:", err)
		return 2
	}
	defer closeLock()
	g, err := guard.New(l, guard.Options{TTL: cfg.TTL, Logger: log})
	if err != nil {
		fmt.Println("error:", err)
		return 2
	}
	pool, err := pgxpool.New(ctx, cfg.DSN)
	if err != nil {
		fmt.Println("error:", err)
		return 2
	}
	defer pool.Close()
	stdin := bufio.NewReader(os.Stdin)
	var (
		res transferResult
		ran bool
	)
	err = g.DoAll(ctx, transferKeys, func(ctx context.Context, tokens map[string]token.Token) error {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		err := runTransfer(wctx, pool, cfg.Fenced, tokens, "A", "B", 10, func(a, b int64) error {
			fmt.Printf("read %d %d %d %d\n", a, b, tokens["acct:A"], tokens["acct:B"])
			_, err := stdin.ReadString('\n') // frozen here
			return err
		})
		res, ran = transferOutcome(err), true
		return err
	})
	if !ran {
		fmt.Println("error: DoAll:", strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	// DoAll's own error adds only the leases lost while frozen.
	js, _ := json.Marshal(res)
	fmt.Printf("result %s\n", js)
	return 0
}
