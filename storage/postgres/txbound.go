package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fenceguard/fenceguard/token"
)

// Errors of a fenced transaction's end, tested with [errors.Is].
var (
	// ErrHoldExpired: the fenced transaction outlived its bound — the
	// lease's end ([token.Expiry]), the HoldTimeout or the context's
	// deadline — and was rolled back: nothing of it committed. See "A
	// frozen holder" at [Tokens.Tx].
	ErrHoldExpired = errors.New("postgres: fenced transaction rolled back: its hold on the resource ended (lease expired or hold bound reached); nothing of it committed")
	// ErrCommitUnknown: the COMMIT was sent but its answer was lost (the
	// context ended, the connection broke), and reading the outcome back
	// failed too: the transaction may or may not have committed. The error
	// is a [*CommitUnknownError] with the transaction's id.
	ErrCommitUnknown = errors.New("postgres: commit outcome unknown")
)

// CommitUnknownError reports a COMMIT whose outcome is unknown. Read it
// back later with SELECT txid_status(TxID): "committed" or "aborted"
// (NULL once the id is too old for the server to tell). It unwraps to
// [ErrCommitUnknown] and to the error that cut the COMMIT short.
type CommitUnknownError struct {
	Resource string // the resource of Tx; those of TxAll in order, joined by ", "
	TxID     int64  // txid_current() of the transaction
	Err      error  // what cut the COMMIT short
}

func (e *CommitUnknownError) Error() string {
	return fmt.Sprintf("postgres: commit of fenced transaction %d on %s: outcome unknown: %v", e.TxID, e.Resource, e.Err)
}

func (e *CommitUnknownError) Unwrap() []error { return []error{ErrCommitUnknown, e.Err} }

// txBound is what bounds one fenced transaction on a pool or a connection.
type txBound struct {
	idleMs  int64 // idle_in_transaction_session_timeout set with the claim; 0: none
	leaseUs int64 // µs from the claim to the lease's end, on the server's clock; 0: no lease

	ctx context.Context // Tx's context, which carries the lease's end
	exp time.Time       // the lease's end when the claim was sent
}

// ended returns an error wrapping ErrHoldExpired when b has a lease and
// it has ended; resource names the transaction's resources.
func (b txBound) ended(resource string) error {
	if b.leaseUs <= 0 {
		return nil
	}
	if exp, _ := token.Expiry(b.ctx); !time.Now().Before(exp) {
		return fmt.Errorf("postgres: commit fenced transaction on %s: %w", resource, ErrHoldExpired)
	}
	return nil
}

// leaseExpiry returns the end of the lease ctx reports when one of c's
// tokens is ctx's own or the one ctx carries for that claim's resource
// (guard's multi-key form reports the earliest end of its leases).
func leaseExpiry(ctx context.Context, c claims) (time.Time, bool) {
	_, ct, ok := token.FromContext(ctx)
	if !ok {
		return time.Time{}, false
	}
	for _, x := range c {
		if x.t == ct {
			return token.Expiry(ctx)
		}
		if lt, ok := token.Lookup(ctx, x.resource); ok && lt == x.t {
			return token.Expiry(ctx)
		}
	}
	return time.Time{}, false
}

// bound computes the bounds of a transaction whose claims c are sent now,
// under ctx (Tx's context, deadline dl if hasDl). It fails with
// ErrHoldExpired when the lease has already ended.
func (k *Tokens) bound(ctx context.Context, c claims, dl time.Time, hasDl bool) (txBound, error) {
	b := txBound{ctx: ctx}
	if k.hold < 0 {
		return b, nil
	}
	d := k.hold
	if d == 0 {
		d = defaultHoldTimeout
	}
	if exp, ok := leaseExpiry(ctx, c); ok {
		left := time.Until(exp)
		if left <= 0 {
			return b, ErrHoldExpired
		}
		b.exp, b.leaseUs = exp, max(1, left.Microseconds())
		if k.hold == 0 {
			d = left // the default follows the lease
		} else {
			d = min(d, left)
		}
	}
	if hasDl {
		d = min(d, time.Until(dl))
	}
	d = min(d, maxHoldTimeout) // a lease ending beyond what the server can bound
	b.idleMs = max(1, d.Milliseconds())
	return b, nil
}

// leaseMarker is in the message of the error leaseCheckSQL raises.
const leaseMarker = "fenceguard: lease ended before commit"

// leaseSQL records, for the rest of the transaction, when its lease ends
// on the server's clock: $4 µs after the claim (0: no lease). A custom
// setting, in µs since the epoch, so that no DateStyle reads it back
// differently.
const leaseSQL = `set_config('fenceguard.lease_end', CASE WHEN $4::bigint > 0
 THEN ((extract(epoch FROM clock_timestamp()) * 1000000)::bigint + $4::bigint)::text ELSE '' END, true)`

// leaseCheckSQL runs right before COMMIT: it fails when the lease (moved
// on by $1 µs of renewals since the claim) has ended on the server's
// clock, and otherwise bounds the idle time until the COMMIT by what is
// left of it, so that a holder frozen between this statement and its
// COMMIT has its session ended, and the transaction rolled back, at the
// lease's end. It only ever lowers the idle bound: a tighter one set with
// the claim (HoldTimeout, the context's deadline, the session's own
// setting) stays.
const leaseCheckSQL = `WITH fenceguard_l AS (SELECT current_setting('fenceguard.lease_end')::bigint + $1::bigint
 - (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS left_us,
 (extract(epoch FROM current_setting('idle_in_transaction_session_timeout')::interval) * 1000)::bigint AS cur_ms)
SELECT CASE WHEN left_us > 0
 THEN set_config('idle_in_transaction_session_timeout', CASE WHEN cur_ms > 0 AND cur_ms <= left_us / 1000
  THEN current_setting('idle_in_transaction_session_timeout')
  ELSE least(` + maxHoldMs + `, greatest(1, left_us / 1000))::text END, true)
 ELSE (SELECT '` + leaseMarker + `'::text)::boolean::text END FROM fenceguard_l`

// maxHoldMs is maxHoldTimeout in milliseconds, as SQL text.
const maxHoldMs = "2147483647"

// isHoldEnd reports whether err says the hold bound ended the
// transaction: the lease check refusing the commit, or the server ending
// an idle session (SQLSTATE 25P03).
func isHoldEnd(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	return pgErr.Code == "25P03" || (pgErr.Code == "22P02" && strings.Contains(pgErr.Message, leaseMarker))
}

// isFailedTx reports whether err says the transaction had failed before
// the statement (SQLSTATE 25P02).
func isFailedTx(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "25P02"
}

// holdEnded returns err, matching ErrHoldExpired too when the hold bound
// ended the transaction.
func holdEnded(err error) error {
	if err != nil && isHoldEnd(err) && !errors.Is(err, ErrHoldExpired) {
		return fmt.Errorf("%w: %w", ErrHoldExpired, err)
	}
	return err
}

// commit commits tx, which holds the claim of resource (transaction id
// txid) under the bounds b. db is what Tx was given, for reading an
// unknown outcome back. Under a lease it checks first, here and on the
// server, that the lease has not ended.
func (k *Tokens) commit(ctx context.Context, db DB, tx pgx.Tx, resource string, b txBound, txid int64) error {
	if b.leaseUs > 0 {
		if err := b.ended(resource); err != nil {
			rollback(ctx, tx)
			return err
		}
		exp, _ := token.Expiry(b.ctx)
		ext := max(0, exp.Sub(b.exp).Microseconds())
		// In a failed transaction (fn went on past an error) or one fn
		// ended itself, the check cannot run and COMMIT commits nothing:
		// COMMIT then reports it as it would without a lease.
		if _, err := tx.Exec(ctx, leaseCheckSQL, ext); err != nil && !errors.Is(err, pgx.ErrTxClosed) && !isFailedTx(err) {
			rollback(ctx, tx)
			return fmt.Errorf("postgres: commit fenced transaction on %s: %w", resource, holdEnded(err))
		}
	}
	if beforeCommit != nil {
		beforeCommit()
	}
	err := tx.Commit(ctx)
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	switch {
	case isHoldEnd(err):
		return fmt.Errorf("postgres: commit fenced transaction on %s: %w", resource, holdEnded(err))
	case errors.As(err, &pgErr), pgconn.SafeToRetry(err), txid == 0,
		errors.Is(err, pgx.ErrTxCommitRollback), errors.Is(err, pgx.ErrTxClosed):
		// The server answered, or the COMMIT was never sent: not committed.
		return fmt.Errorf("postgres: commit fenced transaction on %s: %w", resource, err)
	}
	// The COMMIT went out and its answer was lost: read the outcome back
	// on another connection.
	committed, known := k.outcome(ctx, db, txid)
	switch {
	case !known:
		return &CommitUnknownError{Resource: resource, TxID: txid, Err: err}
	case committed:
		return nil
	default:
		return fmt.Errorf("postgres: commit fenced transaction on %s: not committed (read back): %w", resource, err)
	}
}

// beforeCommit, when set (by tests), runs between the lease check and the
// COMMIT.
var beforeCommit func()

// outcomeTimeout bounds reading an unknown commit's outcome back when the
// caller's context has no deadline (it was cancelled).
const outcomeTimeout = 2 * time.Second

// outcome reads back whether transaction txid committed, on a connection
// other than the one whose COMMIT lost its answer: another of a pool's,
// or a new one with a connection's configuration. A transaction still in
// progress (its COMMIT not yet arrived) is waited for, within
// outcomeTimeout, or ctx's deadline and rollbackGrace when that is sooner.
func (k *Tokens) outcome(ctx context.Context, db DB, txid int64) (committed, known bool) {
	bound := outcomeTimeout
	if dl, ok := ctx.Deadline(); ok {
		// A call returns by its deadline: past it, only a short grace.
		bound = min(bound, max(time.Until(dl), 0)+rollbackGrace)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
	defer cancel()
	var q querier = db
	var cfg *pgx.ConnConfig
	switch c := db.(type) {
	case *pgx.Conn:
		cfg = c.Config()
	case interface{ Conn() *pgx.Conn }: // *pgxpool.Conn
		cfg = c.Conn().Config()
	}
	if cfg != nil {
		conn, err := pgx.ConnectConfig(rctx, cfg.Copy())
		if err != nil {
			return false, false
		}
		defer func() { _ = conn.Close(context.WithoutCancel(rctx)) }()
		q = conn
	}
	wait := 5 * time.Millisecond
	for {
		var status *string
		if err := q.QueryRow(rctx, `SELECT txid_status($1)`, txid).Scan(&status); err != nil || status == nil {
			return false, false
		}
		switch *status {
		case "committed":
			return true, true
		case "aborted":
			return false, true
		}
		t := time.NewTimer(wait)
		select {
		case <-rctx.Done():
			t.Stop()
			return false, false
		case <-t.C:
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}
