package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/enforce"
)

var (
	// ErrLockTimeout: a fenced statement waited longer than the
	// session's innodb_lock_wait_timeout for a row lock (error 1205),
	// usually a claim waiting for the holder of the same resource.
	// Nothing of the call was written: a transaction of this package's
	// own ([Tokens.Tx], [Tokens.TxAll], and Delete, Upsert or Returning
	// on a *sql.DB or *sql.Conn) was rolled back; in a caller's *sql.Tx
	// the server rolled back the statement and this package its
	// savepoint, and the rest of the transaction is the caller's to end
	// (the whole of it is rolled back under innodb_rollback_on_timeout).
	// Like [ErrDeadlock] it is not a refusal of the token.
	ErrLockTimeout = errors.New("mysql: lock wait timeout, transaction rolled back")
	// ErrCommitUnknown: the connection was lost while the COMMIT of a
	// fenced transaction was on its way, or ctx ended while a statement
	// that commits on its own ran (a claim, an Update, a Read's claim or
	// a Reset on a *sql.DB or *sql.Conn: the server does not stop a
	// statement whose client went away, a lock wait included, and may
	// apply it after the call returned), so whether it took effect is not
	// known. Read the data back before retrying.
	ErrCommitUnknown = errors.New("mysql: commit outcome unknown")
	// ErrHoldExpired: the fenced transaction's hold bound struck (its
	// lease ended, or it sat idle for longer than the bound) and it was
	// rolled back; nothing of it committed.
	ErrHoldExpired = errors.New("mysql: hold of the fenced transaction expired")
)

const (
	erLockWaitTimeout = 1205 // ER_LOCK_WAIT_TIMEOUT
	erClientTimeout   = 4031 // ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8.0.24+)
	erNoSavepoint     = 1305 // ER_SP_DOES_NOT_EXIST: SAVEPOINT … does not exist

	defaultHoldTimeout = 15 * time.Second
	// maxWaitSecs is the largest wait_timeout and innodb_lock_wait_timeout
	// the servers take.
	maxWaitSecs = 31536000
	// maxTxClaims is the most resources one fenced transaction claims:
	// two parameters each in one statement, within the protocol's 65,535.
	maxTxClaims = 65535 / 2
	// cleanupTimeout bounds what runs on a fresh context: a rollback and
	// the restoring of the session's settings.
	cleanupTimeout = 10 * time.Second
)

// txClaim is one resource of a fenced transaction, token resolved and
// admitted.
type txClaim struct {
	resource string
	t        token.Token
}

// txClaims are the resources of one fenced transaction, sorted by their
// bytes (the order of the high-water table's VARBINARY key), each once.
type txClaims []txClaim

// in returns "IN (?, …)" over c's resources, and its arguments.
func (c txClaims) in() (string, []any) {
	args := make([]any, len(c))
	for i, x := range c {
		args[i] = x.resource
	}
	return `IN (?` + strings.Repeat(", ?", len(c)-1) + `)`, args
}

func (c txClaims) name() string {
	rs := make([]string, len(c))
	for i, x := range c {
		rs[i] = x.resource
	}
	return strings.Join(rs, ", ")
}

// Tx runs fn in a fenced transaction on the default high-water table
// (fence_tokens in the connection's database). See [Tokens.Tx].
func Tx(ctx context.Context, db *sql.DB, resource string, t token.Token, fn func(*sql.Tx) error) error {
	return defaultTokens.Tx(ctx, db, resource, t, fn)
}

// TxAll runs fn in a fenced transaction on the default high-water table
// that claims every resource of claims. See [Tokens.TxAll].
func TxAll(ctx context.Context, db *sql.DB, claims map[string]token.Token, fn func(*sql.Tx) error) error {
	return defaultTokens.TxAll(ctx, db, claims, fn)
}

// Tx claims resource for t, runs fn in the same transaction and commits.
// The claim is the [Fence]'s upsert of resource's row in the high-water
// table, sent right after BEGIN, before fn runs. It holds the row's
// exclusive lock until the transaction ends, so fenced transactions on
// one resource run one at a time and everything fn does happens under
// the claim: a holder with a lower token is refused, one with a higher
// token waits for this commit.
//
//   - Forged (the [TokensOptions.Check] refuses t): nothing is sent, fn
//     does not run, and Tx returns the check's [*token.ForgedError].
//   - Stale: fn does not run, the transaction is rolled back (no mark
//     moves), and Tx returns a [*token.StaleError] with the current mark.
//   - fn returns an error: rollback, claim included, and that error is
//     returned, matching [ErrDeadlock] or [ErrLockTimeout] too when it is
//     the server's 1213 or 1205, and [ErrHoldExpired] when the hold bound
//     ended the transaction under fn.
//   - fn panics: rollback, and the panic carries on.
//   - fn commits or rolls back tx itself: Tx returns an error (the
//     transaction is done), though what fn committed stays committed,
//     past the lease check Tx makes before its own COMMIT. Leave ending
//     tx to Tx.
//   - fn returns nil, but the server rolled the transaction back under it
//     (a deadlock whose error fn dropped): nothing commits, and Tx returns
//     an error wrapping [ErrDeadlock]. The session runs with autocommit
//     off, so the statements fn sent after the rollback, which no claim
//     covered, are rolled back too rather than committed one by one.
//   - InnoDB picks the transaction as a deadlock victim (1213): it is
//     rolled back and the error wraps [ErrDeadlock]; a lock wait timeout
//     (1205) is rolled back too and wraps [ErrLockTimeout]. Neither is a
//     refusal of the token: retry the whole Tx. Tx does not retry them
//     itself, since fn may have acted outside the database.
//   - ctx is cancelled: the statement in flight fails and the transaction
//     is rolled back rather than committed. A connection broken while the
//     COMMIT is on its way leaves the outcome open: the error then wraps
//     [ErrCommitUnknown].
//
// An empty resource and a zero t are taken from ctx ([token.FromContext],
// [token.Lookup]); the context's token is used only for its own resource
// key.
//
// # Isolation
//
// The transaction has the session's isolation level; READ COMMITTED,
// REPEATABLE READ (InnoDB's default) and SERIALIZABLE all work. The claim
// is a write, and InnoDB decides it on the newest committed mark under the
// row's lock whatever the level. Under REPEATABLE READ the snapshot of
// fn's plain reads is taken at fn's first read, after the claim got its
// lock, so fn sees everything the previous holder committed: no
// serialization failure to retry, unlike PostgreSQL.
//
// The resource key is the table's primary key: a claim on an existing
// mark locks that one index record (no gap lock, under any level); a first
// claim on a new key inserts it under an insert-intention lock, which
// waits only for a range lock on the high-water table, which nothing of
// this package takes. Fenced transactions over one resource therefore
// wait for each other and for nothing else; TxAll's ordered claims never
// deadlock each other. fn's own statements can deadlock with other
// transactions: that is [ErrDeadlock].
//
// # A frozen holder
//
// A lease's end does not end a database transaction, so Tx bounds its
// own. Before BEGIN it sets, for its session, wait_timeout (the server
// closes a session idle for that long, rolling its transaction back and
// freeing the resource) to the bound: the lease's time left when ctx
// carries the end of the lease behind the token ([token.Expiry], as
// guard.Do's context does), else [TokensOptions.HoldTimeout] (15 s by
// default), the time left to ctx's deadline when sooner; and, when ctx
// has a deadline, innodb_lock_wait_timeout to the time left to it (whole
// seconds, rounded down, at least one), so a
// claim does not wait for a lock past the caller's deadline; it also
// turns autocommit off. All are restored on the connection when Tx ends
// (a connection that cannot be restored, or whose transaction did not
// end cleanly, is closed). Before COMMIT, under a lease, Tx checks the lease
// (moved on by renewals) and refuses to commit past its end with
// [ErrHoldExpired], then sets wait_timeout to the lease's time left, so a
// holder frozen between that check and its COMMIT has its session closed
// by the server.
//
// The limit, stated plainly: both settings are whole seconds, the time
// left rounded down but at least one second. A holder that passes the
// check before COMMIT with less than a second of lease left and then
// freezes can still commit up to that second after its lease ended (plus
// the COMMIT's one-way delay to the server). wait_timeout counts idle
// time only: a holder frozen while a large result is still streaming to
// it is not idle. A negative HoldTimeout turns the hold bound off, lease
// included; the lock wait still follows ctx's deadline.
//
// Tx needs a *sql.DB, to hold one connection for its session settings.
// Inside a transaction of your own, claim with [Fence] on the *sql.Tx
// instead: the claim then holds the row lock until you end it.
func (k *Tokens) Tx(ctx context.Context, db *sql.DB, resource string, t token.Token, fn func(*sql.Tx) error) error {
	if err := txArgs(db, fn); err != nil {
		return err
	}
	if ck, _, ok := token.FromContext(ctx); resource == "" && ok {
		resource = ck
	}
	t, err := enforce.Resolve(ctx, resource, t)
	if err != nil {
		return fmt.Errorf("mysql: %w", err)
	}
	if err := checkResource(resource); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mysql: fenced transaction on %s: %w", resource, err)
	}
	if err := enforce.Admit(ctx, k.check, resource, t); err != nil {
		return fmt.Errorf("mysql: %w", err)
	}
	return k.tx(ctx, db, txClaims{{resource, t}}, fn)
}

// TxAll is [Tokens.Tx] over several resources, each with its own token
// (claims maps each resource to its token): it claims all of them, runs
// fn in the same transaction and commits. The claims are one multi-row
// upsert in the resources' byte order, so fenced transactions over
// overlapping sets take the marks' row locks in one order and never
// deadlock each other, then one locking read of the marks. A resource
// without a mark gets one first, 0 (which every token passes), outside the
// transaction, one statement each: a multi-row upsert inserting new keys
// deadlocks with another doing the same, on InnoDB's duplicate-key locks.
//
// All or nothing: if any token is stale, fn does not run, the transaction
// is rolled back so no mark moves, and TxAll returns the
// [*token.StaleError] of the first refused resource in that order. Every
// token is resolved and checked before anything is sent: an empty or nil
// claims, or an empty resource, wraps [token.ErrNoResource]; a zero token
// is the one ctx carries for that very resource, else [token.ErrMissing];
// a forged one is the check's [*token.ForgedError]; more than 32,767
// resources is [ErrBadInput]. The hold bound follows ctx's lease when one
// of the tokens is ctx's for its resource. Everything else is Tx's.
func (k *Tokens) TxAll(ctx context.Context, db *sql.DB, claims map[string]token.Token, fn func(*sql.Tx) error) error {
	if err := txArgs(db, fn); err != nil {
		return err
	}
	switch {
	case len(claims) == 0:
		return fmt.Errorf("%w: fenced transaction on no resources: %w", ErrBadInput, token.ErrNoResource)
	case len(claims) > maxTxClaims:
		return fmt.Errorf("%w: fenced transaction on %d resources, more than the %d one statement can claim", ErrBadInput, len(claims), maxTxClaims)
	}
	c := make(txClaims, 0, len(claims))
	for r, t := range claims {
		c = append(c, txClaim{r, t})
	}
	slices.SortFunc(c, func(a, b txClaim) int { return strings.Compare(a.resource, b.resource) })
	for i := range c {
		r := c[i].resource
		if r == "" {
			return fmt.Errorf("mysql: fenced transaction: %w", token.ErrNoResource)
		}
		t, err := enforce.Resolve(ctx, r, c[i].t)
		if err != nil {
			return fmt.Errorf("mysql: %w", err)
		}
		if err := checkResource(r); err != nil {
			return err
		}
		if err := enforce.Admit(ctx, k.check, r, t); err != nil {
			return fmt.Errorf("mysql: %w", err)
		}
		c[i].t = t
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mysql: fenced transaction on %s: %w", c.name(), err)
	}
	return k.tx(ctx, db, c, fn)
}

func txArgs(db *sql.DB, fn func(*sql.Tx) error) error {
	switch {
	case db == nil:
		return fmt.Errorf("%w: nil DB", ErrBadInput)
	case fn == nil:
		return fmt.Errorf("%w: nil fn", ErrBadInput)
	}
	return nil
}

// leaseExpiry returns the end of the lease ctx reports when one of c's
// tokens is ctx's own or the one ctx carries for that claim's resource.
func leaseExpiry(ctx context.Context, c txClaims) (time.Time, bool) {
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

// floorSecs is d in whole seconds, rounded down, within what the servers
// take.
func floorSecs(d time.Duration) int64 {
	return min(max(int64(d/time.Second), 1), maxWaitSecs)
}

// tx is Tx and TxAll once the claims are resolved and admitted.
func (k *Tokens) tx(ctx context.Context, db *sql.DB, c txClaims, fn func(*sql.Tx) error) (err error) {
	name := c.name()
	exp, leased := leaseExpiry(ctx, c)
	if leased && k.hold >= 0 && !time.Now().Before(exp) {
		return fmt.Errorf("mysql: fenced transaction on %s: %w", name, ErrHoldExpired)
	}
	// The idle bound (wait_timeout) and the lock wait bound.
	var idle, lockWait int64
	if k.hold >= 0 {
		d := k.hold
		if d == 0 {
			d = defaultHoldTimeout
		}
		if leased {
			if k.hold == 0 {
				d = time.Until(exp)
			} else {
				d = min(d, time.Until(exp))
			}
		}
		if dl, ok := ctx.Deadline(); ok {
			d = min(d, time.Until(dl))
		}
		idle = floorSecs(d)
	}
	if dl, ok := ctx.Deadline(); ok {
		lockWait = floorSecs(time.Until(dl))
	}

	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("mysql: fenced transaction on %s: %w", name, err)
	}
	defer conn.Close()
	// autocommit off for the session: InnoDB rolls a deadlock victim's
	// whole transaction back, claim included, and with autocommit on, the
	// statements fn sends after a deadlock it did not return would each
	// commit on their own, outside the claim. Off, they open a transaction
	// that the savepoint check below rolls back.
	set := `SET @fenceguard_wt = @@SESSION.wait_timeout, @fenceguard_lw = @@SESSION.innodb_lock_wait_timeout,
 @fenceguard_ac = @@SESSION.autocommit, SESSION autocommit = 0`
	var args []any
	if idle > 0 {
		// A tighter setting of the session's own is kept.
		set += `, SESSION wait_timeout = LEAST(@@SESSION.wait_timeout, ?)`
		args = append(args, idle)
	}
	if lockWait > 0 {
		set += `, SESSION innodb_lock_wait_timeout = LEAST(@@SESSION.innodb_lock_wait_timeout, ?)`
		args = append(args, lockWait)
	}
	if _, err := conn.ExecContext(ctx, set, args...); err != nil {
		badConn(conn)
		return fmt.Errorf("mysql: fenced transaction on %s: set the hold bound: %w", name, err)
	}
	clean := false // the transaction ended by a COMMIT or ROLLBACK that succeeded
	defer func() {
		if !clean {
			// A transaction may be open: turning autocommit back on
			// would commit it. The server rolls it back with the session.
			badConn(conn)
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if _, rerr := conn.ExecContext(rctx, `SET SESSION wait_timeout = @fenceguard_wt, SESSION innodb_lock_wait_timeout = @fenceguard_lw,
 SESSION autocommit = @fenceguard_ac`); rerr != nil {
			// The pool must not keep a session with a short bound.
			badConn(conn)
		}
	}()

	if len(c) > 1 {
		if err := k.ensureRows(ctx, conn, c); err != nil {
			return err
		}
	}

	start := time.Now()
	idleFrom := start // idle time can have run from here at the earliest
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("mysql: fenced transaction on %s: begin: %w", name, err)
	}
	ended := false
	defer func() {
		if !ended {
			clean = tx.Rollback() == nil
		}
	}()
	if err := k.claimTx(ctx, tx, c); err != nil {
		return err
	}
	// Gone by the COMMIT if the server rolled the transaction back under
	// fn (a deadlock fn did not return).
	if _, err := tx.ExecContext(ctx, `SAVEPOINT fenceguard_claim`); err != nil {
		return k.txErr("claim "+name+" in", err)
	}

	if err := fn(tx); err != nil {
		return fnErr(err, idle > 0 && time.Since(start) >= time.Duration(idle)*time.Second)
	}
	// The savepoint is gone if the server rolled the transaction back
	// under fn; a session closed at the hold bound is ErrHoldExpired, as
	// under fn.
	if _, err := tx.ExecContext(ctx, `RELEASE SAVEPOINT fenceguard_claim`); err != nil {
		if serverErr(err) == erNoSavepoint {
			return fmt.Errorf("mysql: commit fenced transaction on %s: %w: the server rolled the transaction back under fn, claim included (an error fn did not return): %w", name, ErrDeadlock, err)
		}
		if err := fnErr(err, idle > 0 && time.Since(start) >= time.Duration(idle)*time.Second); errors.Is(err, ErrHoldExpired) {
			return fmt.Errorf("mysql: commit fenced transaction on %s: %w", name, err)
		}
		return k.txErr("commit fenced transaction on "+name+":", err)
	}

	if leased && k.hold >= 0 {
		exp, _ := token.Expiry(ctx)
		left := time.Until(exp)
		if left <= 0 {
			return fmt.Errorf("mysql: commit fenced transaction on %s: %w", name, ErrHoldExpired)
		}
		secs := floorSecs(left)
		if _, err := tx.ExecContext(ctx, `SET SESSION wait_timeout = LEAST(@@SESSION.wait_timeout, ?)`, secs); err != nil {
			return k.txErr("commit fenced transaction on "+name+":", err)
		}
		// The session is idle from here until the COMMIT arrives.
		idleFrom, idle = time.Now(), min(idle, secs)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mysql: fenced transaction on %s: %w", name, err)
	}
	if beforeCommit != nil {
		beforeCommit()
	}
	ended = true
	if err := tx.Commit(); err != nil {
		if isConnLost(err) {
			// Sent after the bound ran out, the COMMIT found the session
			// closed: nothing committed. Sooner, it may have.
			if idle > 0 && time.Since(idleFrom) >= time.Duration(idle)*time.Second {
				return fmt.Errorf("mysql: commit fenced transaction on %s: %w: %w", name, ErrHoldExpired, err)
			}
			return fmt.Errorf("mysql: commit fenced transaction on %s: %w: %w", name, ErrCommitUnknown, err)
		}
		return k.txErr("commit fenced transaction on "+name+":", err)
	}
	clean = true
	return nil
}

// beforeCommit, when set (by tests), runs between the lease check and the
// COMMIT.
var beforeCommit func()

// claimTx claims c inside tx: one upsert for one resource; for several,
// one multi-row upsert in c's order, then a locking read of the marks,
// which the upsert's row locks make the newest committed ones.
func (k *Tokens) claimTx(ctx context.Context, tx *sql.Tx, c txClaims) error {
	if len(c) == 1 {
		err := k.claim(ctx, tx, c[0].resource, c[0].t)
		if serverErr(err) == erLockWaitTimeout {
			return fmt.Errorf("%w: %w", ErrLockTimeout, err)
		}
		return err
	}
	var b strings.Builder
	b.WriteString(`INSERT INTO ` + k.table + ` (resource, token, updated_at) VALUES `)
	args := make([]any, 0, 2*len(c))
	for i, x := range c {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(`(?, ?, UTC_TIMESTAMP(6))`)
		args = append(args, x.resource, uint64(x.t))
	}
	// VALUES(col) is the row's own token; MySQL 8.0.20+ deprecates it
	// (a warning) in favour of a row alias MariaDB does not have.
	b.WriteString(` ON DUPLICATE KEY UPDATE updated_at = IF(token <= VALUES(token), UTC_TIMESTAMP(6), updated_at),
 token = IF(token <= VALUES(token), VALUES(token), token)`)
	if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
		return k.txErr("claim "+c.name()+" in", err)
	}
	// FORCE INDEX: on a small table, with the set covering most of its
	// rows, the optimizer prefers a full scan, and a locking full scan
	// locks every row it passes (next-key locks under REPEATABLE READ),
	// other sets' marks included, out of the claims' order: transactions
	// over overlapping sets then deadlock. Read by the primary key, it
	// locks exactly the marks it names, which the upsert holds already.
	in, rargs := c.in()
	rows, err := tx.QueryContext(ctx, `SELECT resource, token FROM `+k.table+` FORCE INDEX (PRIMARY) WHERE resource `+in+` FOR UPDATE`, rargs...)
	if err != nil {
		return k.txErr("claim "+c.name()+" in", err)
	}
	defer rows.Close()
	marks := make(map[string]uint64, len(c))
	for rows.Next() {
		var r []byte
		var m uint64
		if err := rows.Scan(&r, &m); err != nil {
			return k.txErr("claim "+c.name()+" in", err)
		}
		marks[string(r)] = m
	}
	if err := rows.Err(); err != nil {
		return k.txErr("claim "+c.name()+" in", err)
	}
	for _, x := range c {
		m, ok := marks[x.resource]
		if !ok {
			return fmt.Errorf("mysql: claim %s in %s: no mark for %s after the claim", c.name(), k.name, x.resource)
		}
		if cur := token.Token(m); cur > x.t {
			return &token.StaleError{Resource: x.resource, Presented: x.t, Current: cur}
		} else if cur < x.t {
			// The upsert did not leave the token there: a trigger on the
			// table rewrote NEW.token. Not accepted.
			return fmt.Errorf("mysql: claim %s in %s: the mark of %s is %d after the claim of %d (a trigger on the table kept it from advancing)", c.name(), k.name, x.resource, m, uint64(x.t))
		}
	}
	return nil
}

// ensureRows creates, outside any transaction, the rows of c's resources
// that have no mark yet, with mark 0 (which every token passes), one
// autocommitted statement each. A multi-row upsert inserting new keys
// inside a transaction deadlocks with another doing the same: InnoDB's
// duplicate-key checks on keys another transaction inserted but has not
// committed take locks out of the claims' order. On existing rows the
// upsert only takes record locks, in order. The existence check is a
// plain read, which waits for no lock; an INSERT IGNORE of a key a holder
// created meanwhile waits for that holder, holding nothing itself.
func (k *Tokens) ensureRows(ctx context.Context, conn *sql.Conn, c txClaims) error {
	in, args := c.in()
	rows, err := conn.QueryContext(ctx, `SELECT resource FROM `+k.table+` WHERE resource `+in, args...)
	if err != nil {
		return k.txErr("claim "+c.name()+" in", err)
	}
	have := make(map[string]bool, len(c))
	for rows.Next() {
		var r []byte
		if err := rows.Scan(&r); err != nil {
			rows.Close()
			return k.txErr("claim "+c.name()+" in", err)
		}
		have[string(r)] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return k.txErr("claim "+c.name()+" in", err)
	}
	// The session runs with autocommit off (see tx): the read opened a
	// transaction, whose read view would otherwise carry into the fenced
	// one, taken before its claims (fn's reads missing what the previous
	// holder committed; under innodb_snapshot_isolation, 1020 on the
	// claims' locking read).
	if _, err := conn.ExecContext(ctx, `COMMIT`); err != nil {
		return k.txErr("claim "+c.name()+" in", err)
	}
	for _, x := range c {
		if have[x.resource] {
			continue
		}
		if _, err := conn.ExecContext(ctx, `INSERT IGNORE INTO `+k.table+` (resource, token, updated_at) VALUES (?, 0, UTC_TIMESTAMP(6))`, x.resource); err != nil {
			return k.txErr("claim "+c.name()+" in", err)
		}
		// The session runs with autocommit off (see tx): commit each
		// mark on its own, before the next one.
		if _, err := conn.ExecContext(ctx, `COMMIT`); err != nil {
			return k.txErr("claim "+c.name()+" in", err)
		}
	}
	return nil
}

// txErr classifies the failure of a statement of a fenced transaction:
// what wrapErr does, and a lock wait timeout.
func (k *Tokens) txErr(op string, err error) error {
	if errors.Is(err, ErrDeadlock) || errors.Is(err, ErrSchema) || errors.Is(err, ErrLockTimeout) {
		return err
	}
	if serverErr(err) == erLockWaitTimeout {
		return fmt.Errorf("mysql: %s %s: %w: %w", op, k.name, ErrLockTimeout, err)
	}
	return k.wrapErr(op, err)
}

// fnErr returns fn's error, matching ErrDeadlock, ErrLockTimeout or (when
// the connection was lost after the idle bound) ErrHoldExpired too when it
// is one.
func fnErr(err error, pastIdle bool) error {
	switch {
	case errors.Is(err, ErrDeadlock), errors.Is(err, ErrLockTimeout), errors.Is(err, ErrHoldExpired):
		return err
	case serverErr(err) == erLockDeadlock:
		return fmt.Errorf("%w: %w", ErrDeadlock, err)
	case serverErr(err) == erLockWaitTimeout:
		return fmt.Errorf("%w: %w", ErrLockTimeout, err)
	case pastIdle && isConnLost(err):
		return fmt.Errorf("%w: %w", ErrHoldExpired, err)
	}
	return err
}

// isConnLost reports whether err says the connection was lost (the
// server closes an idle session at wait_timeout).
func isConnLost(err error) bool {
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, gomysql.ErrInvalidConn) ||
		serverErr(err) == erClientTimeout
}

// rollback rolls tx back; its error is of no use (the transaction may
// already be over).
func rollback(tx *sql.Tx) { _ = tx.Rollback() }

// badConn makes the pool discard conn when it is closed.
func badConn(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
}
