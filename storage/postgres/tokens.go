package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fenceguard/fenceguard/token"
)

// TokensOptions configure [NewTokens]. The zero value selects the defaults.
type TokensOptions struct {
	// Name of the high-water table: {table} (found through the
	// search_path) or {schema, table}. Default {"fence_tokens"}.
	Name pgx.Identifier

	// ClaimWithFirstStatement makes [Tokens.Tx] send the claim together
	// with fn's first statement instead of before fn runs: one round trip
	// less per transaction, but fn then starts before the claim is known
	// and must not act outside the database until its first statement has
	// returned (see "Round trips" at [Tokens.Tx]). Default false: claim,
	// then run fn.
	ClaimWithFirstStatement bool

	// Check runs before every claim of [Tokens.Tx] and of the [Fence] made
	// from these Tokens, with the resource and the token; a refused token
	// sends nothing. Nil is [token.DefaultCheck], the clock bound;
	// [token.NoCheck] turns checking off.
	Check token.Check

	// Logger receives the audit record of every [Tokens.Reset] (and
	// [Fence.Reset]). Nil is slog.Default().
	Logger *slog.Logger

	// HoldTimeout bounds how long a transaction of [Tokens.Tx] may sit
	// idle while it holds a claim: the server ends the session of a holder
	// that sends nothing for that long — frozen, paused, partitioned —
	// which rolls its transaction back and frees the resource for the next
	// holder, and the frozen holder's COMMIT then fails.
	//
	// Zero, the default, follows the lease: when Tx's context carries the
	// end of the lease behind its token ([token.Expiry]; guard.Do's and a
	// guard lease's contexts do), the transaction cannot commit once the
	// lease has ended, and its idle bound is the time left on the lease
	// when it claims; without a lease the bound is 15 s. A positive value
	// bounds the idle time too (the lease still bounds the commit); the
	// context's deadline, when sooner, is the bound. Negative turns all of
	// it off and leaves the session's idle_in_transaction_session_timeout
	// alone. See "A frozen holder" at [Tokens.Tx].
	HoldTimeout time.Duration
}

// defaultHoldTimeout is the idle bound of a zero
// [TokensOptions.HoldTimeout] without a lease: the TTL of guard's leases
// by default.
const defaultHoldTimeout = 15 * time.Second

// maxHoldTimeout is the largest idle_in_transaction_session_timeout
// PostgreSQL takes: INT_MAX milliseconds, almost 25 days.
const maxHoldTimeout = (1<<31 - 1) * time.Millisecond

// Tokens is the high-water table, fence_tokens(resource text primary key,
// token bigint, updated_at timestamptz): one row per resource key, holding
// the highest token accepted for it. Table mode ([Tokens.Tx]), the
// [Fence] and the tombstones of column mode ([Table.Delete]) keep their
// marks there. [Tokens.Migrate] creates it. [Tokens.Prune] deletes the
// marks not used for a while and keeps what they refused in the table's
// floor (the row of resource ""), which every key without a row is
// compared with.
//
// A Tokens is immutable and safe for concurrent use.
type Tokens struct {
	name   string // as configured, for messages
	table  string // sanitized
	schema string // as configured; "" for the search_path
	lazy   bool   // ClaimWithFirstStatement
	check  token.Check
	logger *slog.Logger
	hold   time.Duration // <0: no bound; 0: the lease, else defaultHoldTimeout

	claimSQL       string // $1 resource, $2 token → (claimed, snapshot high-water)
	txClaimSQL     string // the same, $3 the hold bound in ms (0: none), $4 the lease in µs (0: none) → (claimed, snapshot high-water, the settings, txid)
	claimOrFailSQL string // $1 resource, $2 token, $3 the hold bound, $4 the lease → (claimed, the settings, txid), or an error when refused
	highWaterSQL   string // $1 resource → token
	lockSQL        string // $1 resource → token, the row locked
	insertSQL      string // $1 resource, $2 token → inserted, unless the row exists
	setSQL         string // $1 resource, $2 token: sets the mark
	floorSQL       string // → the floor of pruned marks, no row if none
	pruneSQL       string // $1 age in µs, $2 batch size → (deleted, new floor or NULL)

	// The claims of several resources: built per count of resources
	// (see allSQL), a claimKind and the count → the statement text.
	allTexts sync.Map
	marksSQL string // $1 text[] → (the marks in order, NULL for none; the floor)
}

// resetDoneSQL ends the floor trigger's exemption of Reset's insert.
const resetDoneSQL = `SELECT set_config('fenceguard.reset', '', true)`

// floorGateSQL is the source of a claim's upsert into the high-water
// table tbl: the row (resource, t, now()), proposed only when t is not
// below the floor of pruned marks (the row of resource "") or resource
// has a row, which ON CONFLICT then compares t with.
func floorGateSQL(tbl, resource, t string) string {
	return floorGateFromSQL(tbl, resource, t, "")
}

// floorGateFromSQL is floorGateSQL over the rows of from, a FROM clause.
func floorGateFromSQL(tbl, resource, t, from string) string {
	return `SELECT ` + resource + `, ` + t + `, now()` + from + ` WHERE ` + t + ` >= coalesce((SELECT token FROM ` + tbl + ` WHERE resource = ''), 0)
 OR EXISTS (SELECT FROM ` + tbl + ` WHERE resource = ` + resource + `)`
}

// staleMarker is in the message of the error claimOrFailSQL raises.
const staleMarker = "fenceguard: stale fencing token"

// isStaleRaise reports whether err is claimOrFailSQL refusing the token.
func isStaleRaise(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "22P02" && strings.Contains(pgErr.Message, staleMarker)
}

// floorRaise reports whether err is the floor's trigger refusing a new
// mark below the floor of pruned marks, and the floor it reported.
func floorRaise(err error) (token.Token, bool) {
	var pgErr *pgconn.PgError
	if !isStaleRaise(err) || !errors.As(err, &pgErr) {
		return 0, false
	}
	f, ok := strings.CutPrefix(pgErr.Detail, "floor=")
	if !ok {
		return 0, false
	}
	v, perr := strconv.ParseInt(f, 10, 64)
	if perr != nil || v <= 0 {
		return 0, false
	}
	return token.Token(v), true
}

var defaultTokens = mustTokens(TokensOptions{})

func mustTokens(o TokensOptions) *Tokens {
	k, err := NewTokens(o)
	if err != nil {
		panic(err) // only for the constant defaults
	}
	return k
}

// NewTokens returns the high-water table named by o. It fails with a
// descriptive error for an unusable name; it does not touch
// the database.
func NewTokens(o TokensOptions) (*Tokens, error) {
	if o.Name == nil {
		o.Name = pgx.Identifier{"fence_tokens"}
	}
	if err := checkName("tokens table name", o.Name); err != nil {
		return nil, err
	}
	switch {
	case o.HoldTimeout < 0:
		o.HoldTimeout = -1
	case o.HoldTimeout > maxHoldTimeout:
		return nil, fmt.Errorf("postgres: HoldTimeout %v is above PostgreSQL's maximum %v", o.HoldTimeout, maxHoldTimeout)
	}
	tbl := o.Name.Sanitize()
	k := &Tokens{name: strings.Join(o.Name, "."), table: tbl, lazy: o.ClaimWithFirstStatement,
		check: o.Check, logger: o.Logger, hold: o.HoldTimeout}
	if len(o.Name) == 2 {
		k.schema = o.Name[0]
	}
	// The upsert locks the resource's row, inserting it if need be, and
	// advances it only if the token is not lower. ON CONFLICT works on the
	// newest row version, not the statement's snapshot, so the check is
	// exact; the snapshot read that reports the current mark on refusal can
	// lag (see claim).
	//
	// A key without a row is compared with the floor of pruned marks (the
	// row of resource '', see Prune): the row is proposed only if the
	// token is not below the floor, or the key has a row for ON CONFLICT
	// to compare with. Both reads are the statement's snapshot; the
	// floor's trigger checks a row actually inserted again with a fresh
	// read, for a Prune that committed in between.
	k.claimSQL = `WITH fenceguard_c AS (INSERT INTO ` + tbl + ` AS m (resource, token, updated_at) ` + floorGateSQL(tbl, "$1", "$2::bigint") + `
 ON CONFLICT (resource) DO UPDATE SET token = excluded.token, updated_at = excluded.updated_at
 WHERE m.token <= excluded.token RETURNING true)
SELECT EXISTS (SELECT FROM fenceguard_c), CASE WHEN NOT EXISTS (SELECT FROM fenceguard_c) THEN coalesce((SELECT token FROM ` + tbl + ` WHERE resource = $1), (SELECT token FROM ` + tbl + ` WHERE resource = '')) END`
	// Tx's claim also sets the hold bound for the rest of the transaction
	// (set_config(…, true) is SET LOCAL), in the same statement: no round
	// trip, no statement of its own.
	// It also records when the lease ends, if the transaction has one,
	// and returns the transaction's id, to read an unknown commit's
	// outcome back.
	k.txClaimSQL = k.claimSQL + `, ` + holdSQL + `, ` + leaseSQL + `, txid_current()`
	// PL/pgSQL could RAISE; plain SQL needs no function in the schema. The
	// failing cast is inside a sub-select so that the planner cannot fold
	// it to an error while planning: it runs only when the claim is
	// refused.
	k.claimOrFailSQL = `WITH fenceguard_c AS (INSERT INTO ` + tbl + ` AS m (resource, token, updated_at) ` + floorGateSQL(tbl, "$1", "$2::bigint") + `
 ON CONFLICT (resource) DO UPDATE SET token = excluded.token, updated_at = excluded.updated_at
 WHERE m.token <= excluded.token RETURNING true)
SELECT CASE WHEN EXISTS (SELECT FROM fenceguard_c) THEN true ELSE (SELECT '` + staleMarker + `'::text)::boolean END AS claimed, ` + holdSQL + `, ` + leaseSQL + `, txid_current()`
	k.marksSQL = `SELECT array_agg(m.token ORDER BY u.i), (SELECT token FROM ` + tbl + ` WHERE resource = '')
 FROM unnest($1::text[]) WITH ORDINALITY AS u(resource, i) LEFT JOIN ` + tbl + ` m ON m.resource = u.resource`
	k.highWaterSQL = `SELECT (SELECT token FROM ` + tbl + ` WHERE resource = $1), (SELECT token FROM ` + tbl + ` WHERE resource = '')`
	k.lockSQL = `SELECT token FROM ` + tbl + ` WHERE resource = $1 FOR UPDATE`
	// Reset's insert is the operator's: the floor's trigger lets it below
	// the floor (fenceguard.reset, set for this statement's transaction
	// and cleared by resetDoneSQL right after).
	k.insertSQL = `WITH fenceguard_r AS (SELECT set_config('fenceguard.reset', 'on', true))
INSERT INTO ` + tbl + ` (resource, token, updated_at) SELECT $1, $2::bigint, now() FROM fenceguard_r ON CONFLICT (resource) DO NOTHING RETURNING true`
	k.floorSQL = `SELECT token FROM ` + tbl + ` WHERE resource = ''`
	k.pruneSQL = `WITH fenceguard_v AS (SELECT resource FROM ` + tbl + ` WHERE resource <> '' AND updated_at < now() - $1::bigint * interval '1 microsecond'
 LIMIT $2 FOR UPDATE SKIP LOCKED),
fenceguard_d AS (DELETE FROM ` + tbl + ` m USING fenceguard_v v WHERE m.resource = v.resource RETURNING m.token),
fenceguard_f AS (INSERT INTO ` + tbl + ` AS m (resource, token, updated_at) SELECT '', max(token), now() FROM fenceguard_d HAVING count(*) > 0
 ON CONFLICT (resource) DO UPDATE SET token = greatest(m.token, excluded.token), updated_at = excluded.updated_at RETURNING token)
SELECT (SELECT count(*) FROM fenceguard_d), (SELECT token FROM fenceguard_f)`
	k.setSQL = `UPDATE ` + tbl + ` SET token = $2::bigint, updated_at = now() WHERE resource = $1`
	return k, nil
}

// holdSQL sets idle_in_transaction_session_timeout, for the rest of the
// transaction, to $3 milliseconds — unless $3 is 0, or the session's own
// setting is already a bound at or below it (a DBA's tighter setting
// wins). current_setting reports the value with a unit ("5s", "1min"),
// which the interval cast reads.
const holdSQL = `set_config('idle_in_transaction_session_timeout', CASE
 WHEN $3::bigint <= 0 OR current_setting('idle_in_transaction_session_timeout')::interval
  BETWEEN interval '1 millisecond' AND $3::bigint * interval '1 millisecond'
 THEN current_setting('idle_in_transaction_session_timeout') ELSE $3::bigint::text END, true)`

// claimKind is which of a claim's statements allSQL builds.
type claimKind int

const (
	claimPlain  claimKind = iota // claimSQL's answer: (all claimed, index of the first refused, its snapshot high-water)
	claimTx                      // txClaimSQL's: the same, then the settings and the txid
	claimOrFail                  // claimOrFailSQL's: (claimed, the settings, txid), or an error unless all were claimed
)

// maxCachedClaims is the largest count of resources whose statement
// texts a Tokens keeps; larger sets build theirs per call.
const maxCachedClaims = 64

// allSQL returns the statement of kind that claims n resources (n > 1) in
// one statement: the upsert of claimSQL over a VALUES list of n rows, $1
// and $2 the first resource and its token, $3 and $4 the second, and so
// on; the tx and or-fail kinds take the hold bound and the lease as
// $2n+1 and $2n+2. The rows are proposed in claims order (Go's byte
// order, which is COLLATE "C"), so that the row locks are taken in that
// order. A refused resource is not advanced, but the others in the
// statement are: the transaction (or the savepoint, or claimOrFail's
// error) undoes them, so a refusal moves nothing.
//
// A VALUES list rather than unnest over two arrays: a prepared statement
// over arrays is planned for any length, so PostgreSQL's generic plan
// looks dearer than a plan for the actual two or three resources and
// every execution is planned anew, which doubled the claim's time; a
// statement per count has one plan for every execution.
func (k *Tokens) allSQL(kind claimKind, n int) string {
	key := [2]int{int(kind), n}
	if s, ok := k.allTexts.Load(key); ok {
		return s.(string)
	}
	s := k.buildAllSQL(kind, n)
	if n <= maxCachedClaims {
		k.allTexts.Store(key, s)
	}
	return s
}

func (k *Tokens) buildAllSQL(kind claimKind, n int) string {
	tbl := k.table
	var b strings.Builder
	b.WriteString(`WITH fenceguard_u (i, resource, token) AS (VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(`, `)
		}
		fmt.Fprintf(&b, `(%d, $%d::text, $%d::bigint)`, i, 2*i+1, 2*i+2)
	}
	b.WriteString(`),
fenceguard_c AS (INSERT INTO ` + tbl + ` AS m (resource, token, updated_at) ` + floorGateFromSQL(tbl, "u.resource", "u.token", ` FROM fenceguard_u u`) + `
 ORDER BY u.resource COLLATE "C"
 ON CONFLICT (resource) DO UPDATE SET token = excluded.token, updated_at = excluded.updated_at
 WHERE m.token <= excluded.token RETURNING m.resource)`)
	hold := strings.ReplaceAll(holdSQL, "$3::", "$"+strconv.Itoa(2*n+1)+"::")
	lease := strings.ReplaceAll(leaseSQL, "$4::", "$"+strconv.Itoa(2*n+2)+"::")
	if kind == claimOrFail {
		b.WriteString(`
SELECT CASE WHEN (SELECT count(*) FROM fenceguard_c) = ` + strconv.Itoa(n) + ` THEN true ELSE (SELECT '` + staleMarker + `'::text)::boolean END AS claimed, ` + hold + `, ` + lease + `, txid_current()`)
		return b.String()
	}
	b.WriteString(`,
fenceguard_f AS (SELECT u.i, u.resource FROM fenceguard_u u
 WHERE NOT EXISTS (SELECT FROM fenceguard_c c WHERE c.resource = u.resource) ORDER BY u.i LIMIT 1)
SELECT NOT EXISTS (SELECT FROM fenceguard_f), (SELECT i FROM fenceguard_f),
 (SELECT coalesce((SELECT token FROM ` + tbl + ` WHERE resource = f.resource), (SELECT token FROM ` + tbl + ` WHERE resource = '')) FROM fenceguard_f f)`)
	if kind == claimTx {
		b.WriteString(`, ` + hold + `, ` + lease + `, txid_current()`)
	}
	return b.String()
}

// HighWater returns the highest token accepted for resource, or, if it has
// no mark (none accepted, or pruned), the floor of pruned marks it is
// compared with ([Tokens.Prune]); 0 if neither.
func (k *Tokens) HighWater(ctx context.Context, db DB, resource string) (token.Token, error) {
	if resource == "" {
		return 0, fmt.Errorf("postgres: %w", token.ErrNoResource)
	}
	if db == nil {
		return 0, fmt.Errorf("%w: nil DB", ErrBadInput)
	}
	cur, _, err := k.highWater(ctx, db, resource)
	return cur, err
}

// highWater reads resource's mark; found is false when it has no row, and
// the mark is then the floor of pruned marks (0 if none).
func (k *Tokens) highWater(ctx context.Context, q querier, resource string) (cur token.Token, found bool, err error) {
	var row, floor *int64
	if err := q.QueryRow(ctx, k.highWaterSQL, resource).Scan(&row, &floor); err != nil {
		return 0, false, k.wrapErr("read high-water of", err)
	}
	if row != nil {
		return token.Token(*row), true, nil
	}
	return floorValue(deref(floor)), false, nil
}

// maxAttempts bounds the retries of a fenced statement whose refusal could
// not be explained (see claim). Each retry needs another writer to lower a
// mark or delete and re-create a row in between; more than one is already
// improbable.
const maxAttempts = 4

// claim advances the marks of c on q, all or none, or tells why not. One
// round trip unless refused. A serialization failure (REPEATABLE READ or
// SERIALIZABLE by default on the session) is retried when q is not a
// transaction: the statement was a transaction of its own.
//
// Several resources are claimed in one statement. Inside a transaction
// (q a [pgx.Tx]: a savepoint of Tx's) a refusal leaves the others
// advanced until the caller rolls back; on its own, the statement fails
// unless it claims them all, so that a refusal moves nothing.
func (k *Tokens) claim(ctx context.Context, q querier, c claims) error {
	_, inTx := q.(pgx.Tx)
	for attempts, retries := 0, 0; attempts < maxAttempts; {
		var (
			claimed bool
			i       int
			snap    *int64
			err     error
		)
		if len(c) == 1 || inTx {
			claimed, i, snap, err = scanClaim(q.QueryRow(ctx, k.claimText(claimPlain, c), claimArgs(c)...), c)
		} else {
			err = q.QueryRow(ctx, k.claimText(claimOrFail, c), claimArgs(c, 0, 0)...).Scan(&claimed, nil, nil, nil)
			if isStaleRaise(err) {
				if _, ok := floorRaise(err); !ok {
					claimed, i, err = false, len(c), nil
				}
			}
		}
		if err != nil {
			if retriable(q, err) && retries < maxSerializationRetries && ctx.Err() == nil {
				retries++
				continue
			}
			if floor, ok := floorRaise(err); ok {
				// A Prune committed while the claim ran: a key's row
				// was pruned, and the floor may be above its token.
				if inTx && len(c) > 1 {
					// The error failed the transaction, where the marks
					// can no longer be read: the caller reads them once it
					// has rolled back (nestedTx).
					return err
				}
				if done, err := k.floorStale(ctx, q, c, floor); done {
					return err
				}
				attempts++
				continue
			}
			return k.claimErr(q, c.name(), err)
		}
		if claimed {
			return nil
		}
		if done, err := k.refused(ctx, q, c, i, snap); done {
			return err
		}
		attempts++
	}
	return k.errNoRefusal(c)
}

// claimErr wraps the error of a claim on q. A serialization failure inside
// the caller's transaction gets a message of its own: the claim cannot be
// retried there, only that whole transaction can.
func (k *Tokens) claimErr(q any, resource string, err error) error {
	if _, nested := q.(pgx.Tx); nested && isSerializationFailure(err) {
		return fmt.Errorf("postgres: claim %s in %s: serialization failure under the isolation level of the caller's transaction, which only a retry of that whole transaction can get past: %w", resource, k.name, err)
	}
	return k.wrapErr("claim "+resource+" in", err)
}

// wrapErr is [wrapErr] for a statement on k's table: a missing table or
// schema is fixed by [Tokens.Migrate].
func (k *Tokens) wrapErr(op string, err error) error {
	return wrapFix(op, k.name, err, func(pgErr *pgconn.PgError) string {
		switch pgErr.Code {
		case "42P01", "3F000":
			return k.migrateFix()
		}
		return ""
	})
}

// migrateFix says how to create or upgrade k's table.
func (k *Tokens) migrateFix() string {
	if k.table == defaultTokens.table {
		return "run postgres.Migrate, which creates or upgrades the high-water table " + k.name
	}
	return "run Migrate on the Tokens named " + k.name + ", which creates or upgrades its high-water table"
}
