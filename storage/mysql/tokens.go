package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/enforce"
)

// TokensOptions configure [NewTokens]. The zero value selects the defaults.
type TokensOptions struct {
	// Name of the high-water table: {table} (in the connection's current
	// database) or {database, table}. Default {"fence_tokens"}.
	Name []string

	// Check runs before every claim of the [Fence] made from these Tokens,
	// with the resource and the token; a refused token sends nothing. Nil
	// is [token.DefaultCheck], the clock bound; [token.NoCheck] turns
	// checking off.
	Check token.Check

	// Logger receives the audit record of every [Tokens.Reset] (and
	// [Fence.Reset]). Nil is slog.Default().
	Logger *slog.Logger

	// HoldTimeout bounds how long a [Tokens.Tx] may sit idle inside its
	// transaction, holding the claim's row lock (see "A frozen holder"
	// there). Zero is the lease's time left when the context carries a
	// lease end, else 15 s; a positive value also bounds it under a lease;
	// negative turns the bound off.
	HoldTimeout time.Duration
}

// MaxResourceLen is the longest resource key, in bytes, the high-water
// table holds (its key column is VARBINARY(767), the longest key InnoDB
// indexes in every row format). A longer key is refused with
// [ErrBadInput] before anything is sent: a server not in strict mode
// would otherwise cut it short, and two keys would share one mark.
const MaxResourceLen = 767

// Tokens is the high-water table, fence_tokens(resource varbinary(767)
// primary key, token bigint unsigned, updated_at datetime(6)): one row per
// resource key, holding the highest token accepted for it. The [Fence]
// keeps its marks there. [Tokens.Migrate] creates it.
//
// A Tokens is immutable and safe for concurrent use.
type Tokens struct {
	name  string // as configured, for messages
	table string // quoted
	// schema and tableName are the parts of the name as configured
	// (schema "" for the connection's database), for information_schema.
	schema, tableName string
	check             token.Check
	logger            *slog.Logger
	hold              time.Duration

	claimSQL     string // resource, then t four times → LAST_INSERT_ID: the mark before, t when there was none, 0 when hidden
	markSQL      string // resource → token, under the row's lock
	resetSQL     string // resource, to, to → LAST_INSERT_ID: the mark before, 0 when there was none
	highWaterSQL string // resource → token
	tombstoneSQL string // resource, t, t: the mark raised to t, or t inserted
}

var defaultTokens = mustTokens(TokensOptions{})

func mustTokens(o TokensOptions) *Tokens {
	k, err := NewTokens(o)
	if err != nil {
		panic(err) // only for the constant defaults
	}
	return k
}

// NewTokens returns the high-water table named by o. It fails with an
// error wrapping [ErrBadInput] for an unusable name; it does not touch the
// database.
func NewTokens(o TokensOptions) (*Tokens, error) {
	if o.Name == nil {
		o.Name = []string{"fence_tokens"}
	}
	tbl, err := quoteName(o.Name)
	if err != nil {
		return nil, err
	}
	k := &Tokens{name: strings.Join(o.Name, "."), table: tbl, check: o.Check, logger: o.Logger, hold: o.HoldTimeout}
	k.tableName = o.Name[len(o.Name)-1]
	if len(o.Name) == 2 {
		k.schema = o.Name[0]
	}
	// MySQL has no RETURNING, and the affected-rows count of an upsert
	// depends on the client's CLIENT_FOUND_ROWS flag (an unchanged row
	// counts 0 without it, 1 with it: the same as an insert). So the
	// statement reports the mark it found through LAST_INSERT_ID(expr),
	// which the server sends back in the statement's OK packet (the
	// driver's Result.LastInsertId), no round trip and no flag needed:
	// the mark before the statement, read under the row's exclusive lock
	// — the newest committed value whatever the isolation level — or, when
	// the row was inserted, the token itself (the VALUES list sets it; the
	// ON DUPLICATE KEY branch sets it again to the mark). The claim was
	// accepted exactly when that value is not above the token.
	//
	// A trigger on the table makes the server report 0 instead (MySQL and
	// MariaDB restore the statement's LAST_INSERT_ID state after a
	// trigger), and 0 is also a mark of 0 found: claim then reads the mark
	// back under the lock to decide.
	//
	// Assignments run left to right, each seeing the ones before, so
	// updated_at, which compares with the old mark, comes first. The
	// token is a parameter each time it is used rather than VALUES(token),
	// which MySQL 8 deprecates and MariaDB has no replacement for.
	k.claimSQL = `INSERT INTO ` + tbl + ` (resource, token, updated_at) VALUES (?, LAST_INSERT_ID(?), UTC_TIMESTAMP(6))
 ON DUPLICATE KEY UPDATE updated_at = IF(token <= ?, UTC_TIMESTAMP(6), updated_at),
 token = IF(LAST_INSERT_ID(token) <= ?, ?, token)`
	k.resetSQL = `INSERT INTO ` + tbl + ` (resource, token, updated_at) VALUES (?, ?, UTC_TIMESTAMP(6))
 ON DUPLICATE KEY UPDATE updated_at = UTC_TIMESTAMP(6), token = IF(LAST_INSERT_ID(token) IS NULL, token, ?)`
	k.tombstoneSQL = `INSERT INTO ` + tbl + ` (resource, token, updated_at) VALUES (?, ?, UTC_TIMESTAMP(6))
 ON DUPLICATE KEY UPDATE updated_at = UTC_TIMESTAMP(6), token = GREATEST(token, ?)`
	k.highWaterSQL = `SELECT token FROM ` + tbl + ` WHERE resource = ?`
	k.markSQL = k.highWaterSQL + ` FOR UPDATE`
	return k, nil
}

// quoteName checks and quotes a table name of one or two parts.
func quoteName(name []string) (string, error) {
	if len(name) < 1 || len(name) > 2 {
		return "", fmt.Errorf("%w: table name %q: want {table} or {database, table}", ErrBadInput, name)
	}
	q := make([]string, len(name))
	for i, p := range name {
		// MySQL: at most 64 characters, no NUL, no trailing space.
		if p == "" || utf8.RuneCountInString(p) > 64 || !utf8.ValidString(p) ||
			strings.ContainsRune(p, 0) || strings.HasSuffix(p, " ") {
			return "", fmt.Errorf("%w: table name %q: each part 1 to 64 characters of valid UTF-8, no NUL, no trailing space", ErrBadInput, name)
		}
		q[i] = "`" + strings.ReplaceAll(p, "`", "``") + "`"
	}
	return strings.Join(q, "."), nil
}

// checkResource refuses what the table cannot hold.
func checkResource(resource string) error {
	if len(resource) > MaxResourceLen {
		return fmt.Errorf("%w: resource key of %d bytes, longer than the high-water table holds (%d)", ErrBadInput, len(resource), MaxResourceLen)
	}
	return nil
}

// HighWater returns the highest token accepted for resource, 0 if none.
// It is a plain read: a report, never a decision (a claim decides by its
// own locked write).
func (k *Tokens) HighWater(ctx context.Context, db DB, resource string) (token.Token, error) {
	if resource == "" {
		return 0, fmt.Errorf("mysql: %w", token.ErrNoResource)
	}
	if db == nil {
		return 0, fmt.Errorf("%w: nil DB", ErrBadInput)
	}
	if err := checkResource(resource); err != nil {
		return 0, err
	}
	var v sql.Null[uint64]
	err := db.QueryRowContext(ctx, k.highWaterSQL, resource).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, k.wrapErr("read high-water of "+resource+" in", err)
	}
	return token.Token(v.V), nil
}

// claim advances resource's mark to t on db, or tells why not: one
// statement, one round trip — two when a trigger on the table hides the
// statement's report, or the mark it found was 0.
func (k *Tokens) claim(ctx context.Context, db DB, resource string, t token.Token) error {
	// The token goes as a uint64, not a token.Token: Token's SQL value is
	// a signed bigint and refuses tokens above MaxInt64, which BIGINT
	// UNSIGNED holds.
	u := uint64(t)
	for range maxAttempts {
		res, err := db.ExecContext(ctx, k.claimSQL, resource, u, u, u, u)
		if err != nil {
			return cutOff(ctx, db, k.wrapErr("claim "+resource+" in", err))
		}
		found, err := res.LastInsertId()
		if err != nil {
			return k.wrapErr("claim "+resource+" in", err)
		}
		if found == 0 {
			// Hidden by a trigger, or a mark of 0: the mark as the
			// statement left it decides, read under the row's lock (held
			// already inside a transaction). Outside one, a claim above t
			// in between makes this a refusal, never the other way round.
			var cur uint64
			err := db.QueryRowContext(ctx, k.markSQL, resource).Scan(&cur)
			if errors.Is(err, sql.ErrNoRows) {
				continue // removed in between (Prune): claim again
			}
			if err != nil {
				return k.wrapErr("claim "+resource+" in", err)
			}
			if cur < uint64(t) {
				// The statement did not leave t there: a trigger that
				// rewrites NEW.token, or a Reset in between. Not accepted.
				return fmt.Errorf("mysql: claim %s in %s: the mark is %d after the claim of %d (a trigger on the table kept it from advancing, or a Reset lowered it)", resource, k.name, cur, uint64(t))
			}
			found = int64(cur)
		}
		if cur := token.Token(uint64(found)); cur > t {
			return &token.StaleError{Resource: resource, Presented: t, Current: cur}
		}
		return nil
	}
	return fmt.Errorf("mysql: claim %s: the mark kept disappearing under %d attempts", resource, maxAttempts)
}

// Reset implements [token.Resetter] on k: it sets resource's mark to to,
// lower or higher, in one statement, and returns the mark it replaced (0
// when there was none). See [Fence.Reset].
func (k *Tokens) Reset(ctx context.Context, db DB, resource string, to token.Token) (token.Token, error) {
	if err := enforce.CheckReset(resource, to); err != nil {
		return 0, fmt.Errorf("mysql: %w", err)
	}
	if db == nil {
		return 0, fmt.Errorf("%w: nil DB", ErrBadInput)
	}
	if err := checkResource(resource); err != nil {
		return 0, err
	}
	u := uint64(to)
	res, err := db.ExecContext(ctx, k.resetSQL, resource, u, u)
	var prev int64
	if err == nil {
		prev, err = res.LastInsertId()
	}
	if err != nil {
		return 0, cutOff(ctx, db, k.wrapErr("reset "+resource+" in", err))
	}
	enforce.LogReset(ctx, k.logger, "mysql", resource, token.Token(uint64(prev)), to)
	return token.Token(uint64(prev)), nil
}

// wrapErr classifies a failed statement on k's table: a missing table or
// database is a [*SchemaError] that [Tokens.Migrate] fixes, a deadlock
// wraps [ErrDeadlock], a lock wait timeout [ErrLockTimeout].
func (k *Tokens) wrapErr(op string, err error) error {
	switch serverErr(err) {
	case erNoSuchTable, erBadDB, erBadField:
		return &SchemaError{Object: k.name, Err: err, Fix: k.migrateFix()}
	case erLockDeadlock:
		return fmt.Errorf("mysql: %s %s: %w: %w", op, k.name, ErrDeadlock, err)
	case erLockWaitTimeout:
		return fmt.Errorf("mysql: %s %s: %w: %w", op, k.name, ErrLockTimeout, err)
	}
	return fmt.Errorf("mysql: %s %s: %w", op, k.name, err)
}

// migrateFix says how to create k's table.
func (k *Tokens) migrateFix() string {
	if k.table == defaultTokens.table {
		return "run mysql.Migrate, which creates the high-water table " + k.name
	}
	return "run Migrate on the Tokens named " + k.name + ", which creates its high-water table"
}
