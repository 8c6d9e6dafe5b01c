package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fenceguard/fenceguard/token"
)

// cleanupTimeout bounds what runs on a fresh context: a rollback (the
// caller's context may be the reason for it and already cancelled), and
// the claim sent by the pgx.Tx methods that take no context.
const cleanupTimeout = 10 * time.Second

// Tx runs fn in a fenced transaction on the default high-water table
// (fence_tokens on the search_path). See [Tokens.Tx].
func Tx(ctx context.Context, db DB, resource string, t token.Token, fn func(pgx.Tx) error) error {
	return defaultTokens.Tx(ctx, db, resource, t, fn)
}

// Tx claims resource for t, runs fn in the same transaction and commits.
// The claim is an upsert of resource's row in the high-water table that
// advances it only if t is not lower, and it runs before any statement of
// fn. The row stays locked until the transaction ends, so fenced
// transactions on one resource run one at a time, and everything fn does —
// reads, writes, any SQL — happens under the claim: a holder with a lower
// token is refused, one with a higher token waits for this commit (at most
// for the hold bound, see "A frozen holder").
//
//   - Forged (the [TokensOptions.Check] refuses t, by default a token far
//     above the clock): nothing is sent, fn does not run, and Tx returns
//     the check's [*token.ForgedError].
//   - Stale (a higher token was accepted): none of fn's statements runs, the
//     transaction is rolled back, and Tx returns a [*token.StaleError] with
//     the current mark, whatever fn returned.
//   - fn returns an error: rollback, and that error is returned as is
//     (matching [ErrHoldExpired] too when the hold bound ended the
//     transaction under fn).
//   - fn panics: rollback, and the panic carries on.
//   - The lease has ended, or the hold bound struck: rollback, and an error
//     wrapping [ErrHoldExpired]; nothing committed (see "A frozen holder").
//   - ctx is cancelled: the statement in flight fails, and the transaction
//     is rolled back rather than committed. A cancellation (or a broken
//     connection) while the COMMIT itself is on its way leaves the outcome
//     open: Tx then reads it back, by the transaction's id
//     (txid_status), on another connection of the pool or a new one with
//     the connection's configuration, and returns nil if it committed, an
//     error if it did not, and a [*CommitUnknownError]
//     ([ErrCommitUnknown]) if it cannot tell by ctx's deadline (and a
//     grace of 100 ms), or within 2 s when ctx has no deadline.
//
// An empty resource and a zero t are taken from ctx ([token.FromContext]);
// the context's token is used only for the context's own resource key.
// A context that carries several keys' tokens (guard.DoAll's) gives the
// innermost, the last of its keys, for an empty resource: name the
// resource there, or claim every key with [Tokens.TxAll].
//
// # Round trips
//
// On a [*pgxpool.Pool] or a connection, BEGIN and the claim go to the
// server together, in one round trip, before fn runs; fn's statements and
// the COMMIT follow. A fenced transaction therefore costs one round trip
// more than an unfenced one.
//
// With [TokensOptions.ClaimWithFirstStatement], nothing is sent before fn's
// first statement: BEGIN, the claim and that statement then travel
// together, and the claim is written to fail on a stale token so that the
// server skips the statement behind it — no round trip of its own. The
// price is that fn starts before the claim is known: fn must not act
// outside the database before its first statement has returned, and a
// stale holder learns it from that statement, which returns the
// [*token.StaleError] (so do all later ones). Exec, Query and QueryRow are
// sent along; the other methods of the [pgx.Tx], and fn returning without
// a statement, send the claim on its own first.
//
// # A frozen holder
//
// A lease's end does not end a database transaction, so Tx bounds its own.
// When ctx carries the end of the lease behind the transaction's token
// ([token.Expiry]: the contexts guard.Do and a guard lease give do), the
// transaction cannot commit once the lease has ended:
//
//   - the claim records, on the server's clock, when the lease ends (the
//     time left as read just before the claim was sent), and sets
//     idle_in_transaction_session_timeout, for this transaction only, to
//     that time left: a holder frozen inside fn for that long has its
//     session ended by the server, which rolls the transaction back and
//     frees the resource for the next holder;
//   - before COMMIT, Tx checks the lease here, then on the server (moved on
//     by the renewals since the claim), and bounds the idle time until the
//     COMMIT to what is left of the lease: a holder frozen between the
//     check and its COMMIT is ended by the server at the lease's end. One
//     round trip more per transaction under a lease.
//
// The margin: the server's bound runs from when the claim reached it, so
// the commit can land after the lease's end by the claim's one-way delay
// to the server (guard's lease end already keeps TTL·Drift in hand before
// the lock service's own). A frozen holder then gets an error wrapping
// [ErrHoldExpired] — nothing of its transaction committed — and a guard.Do
// around it reports the lease lost. fn idle (between statements) for
// longer than the lease had left at the claim is ended the same way, even
// if the lease was renewed meanwhile: keep work outside the database out
// of fenced transactions.
//
// Without a lease in ctx, the idle bound is [TokensOptions.HoldTimeout]
// (15 s by default). A positive HoldTimeout also bounds idle time under a
// lease; the time left to ctx's deadline, when sooner, is the bound; a
// negative HoldTimeout turns all of it off. The idle bound counts idle
// time only: a holder frozen while a large result is still streaming to it
// is not idle, so fetch large results in small cursor steps or outside Tx.
// A tighter setting of the session's own is kept. A [*pgx.Conn] you pass is
// closed by the server when the bound strikes; a pool replaces its
// connection.
//
// # Isolation
//
// The transaction has the session's default isolation level. Under
// REPEATABLE READ or SERIALIZABLE, a claim that waited for another holder
// who then committed fails with a serialization failure (SQLSTATE 40001)
// before fn runs; Tx then rolls back and begins again (up to 100 times,
// while ctx lasts). Once fn has run nothing is retried: a serialization
// failure of fn's statements or of COMMIT is returned.
//
// # Inside the caller's transaction
//
// On a [pgx.Tx], Tx claims first and then calls fn, on a savepoint: fn's
// work is undone on failure, and nothing is committed until the caller
// commits the outer transaction, which also holds the claim's lock until
// then. Tx then sets no hold bound — the session and its transaction are
// the caller's, and a bound would outlive Tx and cut the caller's own
// later work short — so bound the outer transaction yourself (SET LOCAL
// idle_in_transaction_session_timeout) if a frozen process must not hold
// the resource. A serialization failure of the claim cannot be retried
// there either (the caller's snapshot stays): Tx returns it, with a
// message saying that the caller's whole transaction must be retried.
//
// The [pgx.Tx] given to fn is not safe for concurrent use, as no pgx.Tx
// is.
//
// [*pgxpool.Pool]: https://pkg.go.dev/github.com/jackc/pgx/v5/pgxpool#Pool
func (k *Tokens) Tx(ctx context.Context, db DB, resource string, t token.Token, fn func(pgx.Tx) error) error {
	if err := txArgs(db, fn); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("postgres: fenced transaction on %s: %w", resource, err)
	}
	resource, t, v, err := resourceToken(ctx, k.check, resource, t)
	if err != nil {
		return err
	}
	return k.tx(ctx, db, claims{{resource: resource, t: t, v: v}}, fn)
}

// TxAll runs fn in a fenced transaction on the default high-water table
// (fence_tokens on the search_path) that claims every resource of claims.
// See [Tokens.TxAll].
func TxAll(ctx context.Context, db DB, claims map[string]token.Token, fn func(pgx.Tx) error) error {
	return defaultTokens.TxAll(ctx, db, claims, fn)
}

// TxAll is [Tokens.Tx] over several resources, each with its own token
// (claims maps each resource to its token): it claims all of them, runs fn
// in the same transaction and commits. It is the resource side of a
// critical section over several locks, such as guard's multi-key form.
//
// The claims are one statement, sent with BEGIN as Tx's claim is, so
// claiming several resources costs the round trip of claiming one. It
// claims the resources in one canonical order — sorted by their bytes —
// so that fenced transactions over overlapping sets of resources, from
// any number of processes, take the marks' row locks in the same order
// and never deadlock each other; each then waits for the other as Tx does.
//
// All or nothing: if any token is stale, no mark moves, nothing of fn
// commits (fn does not run; with ClaimWithFirstStatement its first
// statement fails), and TxAll returns the [*token.StaleError] of the
// first refused resource in that order. Every token is resolved and
// checked before anything is sent, and a refusal there sends nothing: a
// forged token (the [TokensOptions.Check] refuses it) returns the check's
// [*token.ForgedError]; an empty or nil claims, or an empty resource,
// wraps [token.ErrNoResource] (claims has no resource the context would
// fill in); a zero token that the context does not carry for that
// resource wraps [token.ErrMissing]; more than 32,766 resources (one
// statement's parameters) is [ErrBadInput]. A zero token is the one the context
// carries for that very resource ([token.FromContext]; a context of
// guard's multi-key form carries every key's token).
//
// Everything else is Tx's: the outcomes (fn's error, a panic, a
// cancelled ctx, [*CommitUnknownError] whose Resource names every
// resource, joined by ", "), ClaimWithFirstStatement, the isolation
// levels, a caller's transaction as db, and the hold bound. The
// transaction follows the lease end ctx reports ([token.Expiry]) when one
// of the claims' tokens is the one ctx carries for that resource
// ([token.Lookup]) or ctx's own ([token.FromContext]); guard's multi-key
// form reports the earliest end of its leases, so the transaction cannot
// commit once any of them has ended.
func (k *Tokens) TxAll(ctx context.Context, db DB, claims map[string]token.Token, fn func(pgx.Tx) error) error {
	if err := txArgs(db, fn); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("postgres: fenced transaction: %w", err)
	}
	c, err := resolveAll(ctx, k.check, claims)
	if err != nil {
		return err
	}
	return k.tx(ctx, db, c, fn)
}

// txArgs validates what every fenced transaction gets.
func txArgs(db DB, fn func(pgx.Tx) error) error {
	switch {
	case db == nil:
		return fmt.Errorf("%w: nil DB", ErrBadInput)
	case fn == nil:
		return fmt.Errorf("%w: nil fn", ErrBadInput)
	}
	return nil
}

// tx is Tx and TxAll once the claims are resolved and admitted.
func (k *Tokens) tx(ctx context.Context, db DB, c claims, fn func(pgx.Tx) error) error {
	if outer, ok := db.(pgx.Tx); ok {
		return k.nestedTx(ctx, outer, c, fn)
	}
	conn, _ := db.(*pgx.Conn)
	if pc, ok := db.(interface{ Conn() *pgx.Conn }); ok { // *pgxpool.Conn
		conn = pc.Conn()
	}
	if conn != nil && conn.PgConn().TxStatus() != 'I' {
		// BEGIN would only warn, and COMMIT would end the caller's
		// transaction.
		return fmt.Errorf("%w: the connection is inside a transaction; pass its pgx.Tx", ErrBadInput)
	}

	if !k.lazy {
		return k.eagerTx(ctx, db, c, fn)
	}
	lt := &lazyTx{k: k, db: db, c: c, ctx: ctx}
	lt.deadline, lt.hasDeadline = ctx.Deadline()
	ended := false
	defer func() {
		if !ended && lt.tx != nil {
			rollback(ctx, lt.tx)
		}
	}()
	fnErr := fn(lt)
	if lt.claimErr != nil {
		return lt.claimErr
	}
	if fnErr != nil {
		return holdEnded(fnErr)
	}
	if lt.tx == nil {
		// fn sent nothing: the claim is all there is to do.
		if exp, ok := leaseExpiry(ctx, c); ok && k.hold >= 0 && !time.Now().Before(exp) {
			return fmt.Errorf("postgres: fenced transaction on %s: %w", c.name(), ErrHoldExpired)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("postgres: fenced transaction on %s: %w", c.name(), err)
		}
		ended = true
		return k.claim(ctx, db, c)
	}
	if err := lt.b.ended(c.name()); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("postgres: fenced transaction on %s: %w", c.name(), err)
	}
	ended = true // commit ends the transaction either way
	return k.commit(ctx, db, lt.tx, c.name(), lt.b, lt.txid)
}

// eagerTx is Tx on a pool or a connection: BEGIN and the claim in one
// round trip, then fn on the plain transaction once the claim holds, then
// COMMIT. A refused claim rolls back before fn ever runs.
func (k *Tokens) eagerTx(ctx context.Context, db DB, c claims, fn func(pgx.Tx) error) error {
	dl, hasDl := ctx.Deadline()
	for attempts, retries := 0, 0; attempts < maxAttempts; {
		bound, err := k.bound(ctx, c, dl, hasDl)
		if err != nil {
			return fmt.Errorf("postgres: fenced transaction on %s: %w", c.name(), err)
		}
		var b pgx.Batch
		b.BeginTx(pgx.TxOptions{})
		b.Queue(k.claimText(claimTx, c), claimArgs(c, bound.idleMs, bound.leaseUs)...)
		br := db.SendBatch(ctx, &b)
		tx := br.Tx()
		if tx == nil { // a DB of the caller's own making
			_ = br.Close()
			return fmt.Errorf("%w: %T.SendBatch ignores Batch.BeginTx", ErrBadInput, db)
		}
		var (
			claimed bool
			i       int
			snap    *int64
			txid    int64
		)
		_, err = br.Exec() // BEGIN
		if err == nil {
			claimed, i, snap, err = scanClaim(br.QueryRow(), c, nil, nil, &txid)
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			rollback(ctx, tx)
			if isSerializationFailure(err) && retries < maxSerializationRetries && ctx.Err() == nil {
				// REPEATABLE READ or SERIALIZABLE: the claim waited for a
				// holder that then committed, after this transaction's
				// snapshot was taken. fn has not run: begin again, with a
				// snapshot that includes that commit.
				retries++
				continue
			}
			if floor, ok := floorRaise(err); ok {
				if done, err := k.floorStale(ctx, db, c, floor); done {
					return err
				}
				attempts++
				continue
			}
			return k.wrapErr("claim "+c.name()+" in", err)
		}
		if !claimed {
			// Still inside the transaction: a fresh statement reads the
			// marks if the claim's snapshot lagged.
			done, err := k.refused(ctx, tx, c, i, snap)
			rollback(ctx, tx)
			if done {
				return err
			}
			attempts++
			continue
		}
		return k.run(ctx, db, tx, c.name(), fn, bound, txid)
	}
	return k.errNoRefusal(c)
}

// run calls fn in tx, which holds the claim of the resources named name
// (transaction id txid, bounds b), and commits; it rolls back when fn
// fails or panics, ctx ends or the lease has ended.
func (k *Tokens) run(ctx context.Context, db DB, tx pgx.Tx, name string, fn func(pgx.Tx) error, b txBound, txid int64) (err error) {
	committed := false
	defer func() {
		if !committed {
			rollback(ctx, tx)
		}
	}()
	if err := fn(tx); err != nil {
		return holdEnded(err)
	}
	if err := b.ended(name); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("postgres: fenced transaction on %s: %w", name, err)
	}
	committed = true // commit ends the transaction either way
	return k.commit(ctx, db, tx, name, b, txid)
}

// nestedTx is Tx inside the caller's transaction, on a savepoint.
func (k *Tokens) nestedTx(ctx context.Context, outer pgx.Tx, c claims, fn func(pgx.Tx) error) error {
	for range maxAttempts {
		retry, err := k.nestedOnce(ctx, outer, c, fn)
		if !retry {
			return err
		}
	}
	return k.errNoRefusal(c)
}

// nestedOnce is one attempt of nestedTx. retry is true when the claims of
// several resources were refused by the floor of pruned marks and a fresh
// read, once the savepoint is rolled back, finds no mark above its token.
func (k *Tokens) nestedOnce(ctx context.Context, outer pgx.Tx, c claims, fn func(pgx.Tx) error) (retry bool, err error) {
	sp, err := outer.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("postgres: savepoint for %s: %w", c.name(), err)
	}
	released := false
	defer func() {
		if !released {
			rollback(ctx, sp) // undoes the claims of a refused TxAll too
		}
	}()
	if err := k.claim(ctx, sp, c); err != nil {
		if _, ok := floorRaise(err); ok && len(c) > 1 {
			// The floor's trigger failed the transaction: roll back to
			// the savepoint, then read which resource it refused.
			released = true
			rollback(ctx, sp)
			done, err := k.refused(ctx, outer, c, len(c), nil)
			return !done, err
		}
		return false, err
	}
	if err := fn(sp); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("postgres: fenced transaction on %s: %w", c.name(), err)
	}
	released = true
	if err := sp.Commit(ctx); err != nil {
		return false, fmt.Errorf("postgres: release savepoint for %s: %w", c.name(), err)
	}
	return false, nil
}

// rollbackGrace is how long past the caller's deadline (or after its
// context ended) a rollback may take.
const rollbackGrace = 100 * time.Millisecond

// rollback ends tx on a fresh context: the caller's may be the reason for
// it, and already over. It is bounded by cleanupTimeout, and by the
// caller's deadline plus rollbackGrace, so a call returns by its deadline
// even with PostgreSQL frozen, instead of waiting out cleanupTimeout. A
// rollback cut short
// closes the connection (pgx does so), which ends the transaction on the
// server just the same: nothing of it commits.
func rollback(ctx context.Context, tx pgx.Tx) {
	bound := cleanupTimeout
	if d, ok := ctx.Deadline(); ok {
		bound = min(bound, max(time.Until(d), 0)+rollbackGrace)
	}
	if ctx.Err() != nil {
		bound = min(bound, rollbackGrace)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
	defer cancel()
	_ = tx.Rollback(rctx)
}

// closedTx returns a pgx.Tx whose every method fails with
// [pgx.ErrTxClosed].
func closedTx() pgx.Tx {
	var b pgx.Batch
	b.BeginTx(pgx.TxOptions{})
	return pgx.FailedBatchResults(&b, pgx.ErrTxClosed).Tx()
}

// errRows returns rows that fail with err.
func errRows(err error) pgx.Rows {
	rows, _ := pgx.FailedBatchResults(&pgx.Batch{}, err).Query()
	return rows
}

// lazyTx is the pgx.Tx that Tx gives fn on a pool or a connection. It
// begins the transaction and claims the resource in one round trip, before
// fn runs or, with ClaimWithFirstStatement, together with fn's first
// statement:
//
//	BEGIN; SAVEPOINT fenceguard_claim; <claim>; RELEASE SAVEPOINT fenceguard_claim; <fn's statement>
//
// The claim raises an error when the token is stale, so the server skips
// what follows. The savepoint keeps the transaction usable after that
// error: Tx rolls back to it to read the current mark afresh (and claims
// again in the rare case that the mark is not above the token after all),
// and the connection stays in the transaction until Tx ends it, never
// returning to a pool while fn may still hold it.
type lazyTx struct {
	k  *Tokens
	db DB
	c  claims

	// The deadline of Tx's context, for the hold bound: fn's statements
	// come with contexts of their own.
	deadline    time.Time
	hasDeadline bool

	ctx  context.Context // Tx's context, with the lease's end
	b    txBound         // the bounds set with the claim
	txid int64           // the transaction's id, from the claim

	tx       pgx.Tx // the transaction; nil until it is begun
	claimed  bool   // the claim succeeded: tx is fn's
	claimErr error  // the claim failed: every method returns it
}

var _ pgx.Tx = (*lazyTx)(nil)

// start sends the claim, with BEGIN if the transaction is not begun yet,
// and with sql if sql is not "". On success it returns the batch results
// positioned at sql's result (nil if no sql); the caller must close them.
// userErr is sql's own error when pgx could not even prepare it; the
// claim is then still pending.
func (lt *lazyTx) start(ctx context.Context, sql string, args []any) (br pgx.BatchResults, userErr, claimErr error) {
	for attempts, retries := 0, 0; attempts < maxAttempts; {
		var b pgx.Batch
		begin := lt.tx == nil
		if begin {
			b.BeginTx(pgx.TxOptions{})
		}
		bound, err := lt.k.bound(lt.ctx, lt.c, lt.deadline, lt.hasDeadline)
		if err != nil {
			lt.claimErr = fmt.Errorf("postgres: fenced transaction on %s: %w", lt.c.name(), err)
			return nil, nil, lt.claimErr
		}
		lt.b = bound
		b.Queue(`SAVEPOINT fenceguard_claim`)
		b.Queue(lt.k.claimText(claimOrFail, lt.c), claimArgs(lt.c, bound.idleMs, bound.leaseUs)...)
		b.Queue(`RELEASE SAVEPOINT fenceguard_claim`)
		if sql != "" {
			b.Queue(sql, args...)
		}
		if begin {
			br = lt.db.SendBatch(ctx, &b)
			if lt.tx = br.Tx(); lt.tx == nil { // a DB of the caller's own making
				_ = br.Close()
				lt.claimErr = fmt.Errorf("%w: %T.SendBatch ignores Batch.BeginTx", ErrBadInput, lt.db)
				return nil, nil, lt.claimErr
			}
		} else {
			br = lt.tx.SendBatch(ctx, &b)
		}
		if begin {
			_, err = br.Exec() // BEGIN
		}
		if err == nil {
			_, err = br.Exec() // SAVEPOINT
		}
		if err == nil {
			err = br.QueryRow().Scan(nil, nil, nil, &lt.txid)
		}
		if err == nil {
			_, err = br.Exec() // RELEASE SAVEPOINT
		}
		if err == nil {
			lt.claimed = true
			if sql == "" {
				if err := br.Close(); err != nil {
					lt.claimErr = lt.k.wrapErr("claim "+lt.c.name()+" in", err)
					return nil, nil, lt.claimErr
				}
				return nil, nil, nil
			}
			return br, nil, nil
		}
		_ = br.Close()

		var pre pgx.ErrPreprocessingBatch
		if sql != "" && errors.As(err, &pre) && pre.SQL() == sql {
			// fn's statement is not valid SQL, or its arguments do not
			// encode: nothing ran. Like pgx, report it as the statement's
			// error; the claim goes with the next statement.
			if begin {
				rollback(ctx, lt.tx) // releases a pool's connection
				lt.tx = nil
			}
			return nil, err, nil
		}
		if isSerializationFailure(err) && retries < maxSerializationRetries && ctx.Err() == nil {
			// As in eagerTx: the snapshot predates the commit the claim
			// waited for. Nothing of fn's has run (the statement sent
			// along was skipped), so a new transaction can take its place.
			rollback(ctx, lt.tx)
			lt.tx = nil
			retries++
			continue
		}
		if !isStaleRaise(err) {
			lt.claimErr = lt.k.wrapErr("claim "+lt.c.name()+" in", err)
			return nil, nil, lt.claimErr
		}
		done, err := lt.reread(ctx)
		if done {
			lt.claimErr = err
			return nil, nil, lt.claimErr
		}
		attempts++
	}
	lt.claimErr = lt.k.errNoRefusal(lt.c)
	return nil, nil, lt.claimErr
}

// reread undoes the refused claim and reads the marks with a fresh
// snapshot: the claim's own snapshot may predate the commit that refused
// it. It returns the [*token.StaleError] of the first resource whose mark
// is above its token, or done false when none is (the claim is then sent
// again). Two round trips, but only for a refusal: in the failed
// transaction nothing but the rollback can even be prepared, and pgx has
// dropped the batch's prepared statements after its error.
func (lt *lazyTx) reread(ctx context.Context) (done bool, err error) {
	// Without arguments pgx uses the simple protocol, which takes two
	// statements in one query.
	if _, err := lt.tx.Exec(ctx, `ROLLBACK TO SAVEPOINT fenceguard_claim; RELEASE SAVEPOINT fenceguard_claim`); err != nil {
		return true, lt.k.wrapErr("claim "+lt.c.name()+" in", err)
	}
	done, err = lt.k.refused(ctx, lt.tx, lt.c, len(lt.c), nil)
	var se *token.StaleError
	if err != nil && !errors.As(err, &se) {
		err = lt.k.wrapErr("claim "+lt.c.name()+" in", err)
	}
	return done, err
}

// ensure claims before a method that cannot carry the claim along.
func (lt *lazyTx) ensure(ctx context.Context) error {
	switch {
	case lt.claimErr != nil:
		return lt.claimErr
	case lt.claimed:
		return nil
	}
	_, _, err := lt.start(ctx, "", nil)
	return err
}

// ensureNoContext is ensure for the methods without a context.
func (lt *lazyTx) ensureNoContext() error {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	return lt.ensure(ctx)
}

// pipelined reports whether a statement can go along with the claim: pgx
// batches take no per-query execution mode or result formats.
func (lt *lazyTx) pipelined(args []any) bool {
	if lt.claimed || lt.claimErr != nil {
		return false
	}
	if len(args) > 0 {
		switch args[0].(type) {
		case pgx.QueryExecMode, pgx.QueryResultFormats, pgx.QueryResultFormatsByOID:
			return false
		}
	}
	return true
}

func (lt *lazyTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if lt.pipelined(args) {
		br, userErr, err := lt.start(ctx, sql, args)
		switch {
		case err != nil:
			return pgconn.CommandTag{}, err
		case userErr != nil:
			return pgconn.CommandTag{}, userErr
		}
		tag, err := br.Exec()
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		return tag, err
	}
	if err := lt.ensure(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return lt.tx.Exec(ctx, sql, args...)
}

func (lt *lazyTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if lt.pipelined(args) {
		br, userErr, err := lt.start(ctx, sql, args)
		if err == nil {
			err = userErr
		}
		if err != nil {
			return errRows(err), err
		}
		rows, err := br.Query()
		if err != nil {
			_ = br.Close()
			return rows, err
		}
		return &batchRows{Rows: rows, br: br}, nil
	}
	if err := lt.ensure(ctx); err != nil {
		return errRows(err), err
	}
	return lt.tx.Query(ctx, sql, args...)
}

func (lt *lazyTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, _ := lt.Query(ctx, sql, args...)
	return &row{rows}
}

func (lt *lazyTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := lt.ensure(ctx); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return lt.tx.SendBatch(ctx, b)
}

func (lt *lazyTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := lt.ensure(ctx); err != nil {
		return 0, err
	}
	return lt.tx.CopyFrom(ctx, table, columns, src)
}

func (lt *lazyTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := lt.ensure(ctx); err != nil {
		return nil, err
	}
	return lt.tx.Prepare(ctx, name, sql)
}

// Begin starts a pseudo nested transaction on a savepoint, after the
// claim.
func (lt *lazyTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := lt.ensure(ctx); err != nil {
		return nil, err
	}
	return lt.tx.Begin(ctx)
}

// LargeObjects claims first. If the claim fails, the large objects fail
// with [pgx.ErrTxClosed].
func (lt *lazyTx) LargeObjects() pgx.LargeObjects {
	if err := lt.ensureNoContext(); err != nil {
		return closedTx().LargeObjects()
	}
	return lt.tx.LargeObjects()
}

// Conn claims first, and returns the transaction's connection. If the
// claim was refused, the transaction is put in the failed state before the
// connection is handed out, so that no statement on it runs until Tx rolls
// back; if no connection could be had at all, Conn returns nil.
func (lt *lazyTx) Conn() *pgx.Conn {
	if err := lt.ensureNoContext(); err != nil && lt.tx != nil {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		_, _ = lt.tx.Exec(ctx, `SELECT 'fenceguard: the fencing token was refused'::boolean`)
	}
	if lt.tx == nil {
		return nil
	}
	return lt.tx.Conn()
}

// Commit claims if nothing has yet, and commits. Tx itself commits when fn
// returns; committing in fn makes that commit fail with [pgx.ErrTxClosed],
// as with [pgx.BeginFunc].
func (lt *lazyTx) Commit(ctx context.Context) error {
	if err := lt.ensure(ctx); err != nil {
		return err
	}
	return lt.tx.Commit(ctx)
}

// Rollback rolls back; later methods fail with [pgx.ErrTxClosed].
func (lt *lazyTx) Rollback(ctx context.Context) error {
	if lt.tx == nil {
		lt.tx, lt.claimed = closedTx(), true
		return nil
	}
	return lt.tx.Rollback(ctx)
}

// batchRows are the rows of a statement sent with the claim; closing them
// closes the batch, which frees the connection.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error // from closing the batch
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	if err := r.br.Close(); err != nil && r.Rows.Err() == nil {
		r.err = err
	}
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// row is QueryRow's result over any pgx.Rows, with pgx's semantics.
type row struct{ rows pgx.Rows }

func (r *row) Scan(dest ...any) error {
	defer r.rows.Close()
	if err := r.rows.Err(); err != nil {
		return err
	}
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}
