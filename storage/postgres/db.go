package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/enforce"
)

// DB is what this package needs of a connection. [*pgxpool.Pool],
// [*pgx.Conn] and every [pgx.Tx] satisfy it, so each function runs on a
// pool, on one connection, or inside a transaction the caller already
// holds.
//
// [*pgxpool.Pool]: https://pkg.go.dev/github.com/jackc/pgx/v5/pgxpool#Pool
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// querier is the part of [DB] a single fenced statement needs.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Errors of this package, tested with [errors.Is]. A stale token is a
// [*token.StaleError] (errors.Is(err, [token.ErrStale])); a zero token with
// none in the context wraps [token.ErrMissing]; an empty resource key is
// [token.ErrNoResource].
var (
	// ErrNoRow: the guarded row does not exist. Nothing was written. It
	// unwraps to [token.ErrNotFound].
	ErrNoRow error = &kindError{"postgres: no such row", token.ErrNotFound}
	// ErrBadInput: an argument no call could succeed with (a nil key, a
	// column list that does not match its destinations, an assignment to
	// the key or token column, …). Nothing was sent to the server.
	ErrBadInput = errors.New("postgres: bad input")
	// ErrSchema is what every [*SchemaError] unwraps to.
	ErrSchema = errors.New("postgres: schema not set up for fencing")
)

// kindError is an error value of this package that also matches the
// sentinel of package token for its kind of answer.
type kindError struct {
	msg  string
	kind error
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

// SchemaError reports that the database lacks what a fenced statement
// needs: the guarded table, its token or key column, a unique index on the
// key (Upsert), or the fence_tokens table ([Migrate]). The statement
// failed as a whole, so nothing was written. It unwraps to [ErrSchema] and
// to its cause, usually the server's [*pgconn.PgError].
type SchemaError struct {
	Object string // the table as configured, e.g. "public.items"
	Err    error  // the cause, usually a *pgconn.PgError
	// Fix says what sets the schema up, e.g. "run postgres.Migrate, which
	// creates the high-water table fence_tokens" or "run
	// Table.AddTokenColumn"; empty when the cause does not tell.
	Fix string
}

func (e *SchemaError) Error() string {
	if e.Fix == "" {
		return fmt.Sprintf("postgres: %s is not set up for fencing: %v", e.Object, e.Err)
	}
	return fmt.Sprintf("postgres: %s is not set up for fencing: %v; to fix: %s", e.Object, e.Err, e.Fix)
}

func (e *SchemaError) Unwrap() []error { return []error{ErrSchema, e.Err} }

// schemaCodes are the SQLSTATEs that mean "the schema is not what fencing
// needs" rather than a transient failure.
var schemaCodes = map[string]bool{
	"42P01": true, // undefined_table
	"42703": true, // undefined_column
	"3F000": true, // invalid_schema_name
	"42P10": true, // invalid_column_reference: no unique index for ON CONFLICT
	"42883": true, // undefined_function: e.g. text <= bigint, a token column of the wrong type
	"42804": true, // datatype_mismatch
}

// wrapErr classifies a failed statement about object.
func wrapErr(op, object string, err error) error {
	return wrapFix(op, object, err, nil)
}

// wrapFix is [wrapErr] with fix, which says how to set up what the
// server's error says is missing ("" when it cannot tell).
func wrapFix(op, object string, err error, fix func(*pgconn.PgError) string) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && schemaCodes[pgErr.Code] {
		se := &SchemaError{Object: object, Err: err}
		if fix != nil {
			se.Fix = fix(pgErr)
		}
		return se
	}
	return fmt.Errorf("postgres: %s %s: %w", op, object, err)
}

// names reports whether the server's message names the object name (as
// configured, parts joined by "."): PostgreSQL quotes the name it could
// not find, e.g. relation "fence_tokens" does not exist.
func names(pgErr *pgconn.PgError, name string) bool {
	return strings.Contains(pgErr.Message, `"`+name+`"`)
}

// maxToken is the largest token a bigint column holds.
const maxToken = token.MaxInt64

// admit runs [enforce.Admit] — the zero token and the empty resource are
// refused, then check ([token.DefaultCheck] when nil) — and then refuses a
// token that does not fit a bigint. It runs before any statement, so a
// refused token sends nothing and moves nothing. A [*token.ForgedError]
// comes back as the check returned it; anything else the check returns
// (it could not decide) is wrapped, and refuses just the same.
func admit(ctx context.Context, check token.Check, resource string, t token.Token) (int64, error) {
	if err := enforce.CheckClaim(resource, t); err != nil {
		return 0, fmt.Errorf("postgres: %w", err)
	}
	if err := enforce.Admit(ctx, check, resource, t); err != nil {
		var fe *token.ForgedError
		if errors.As(err, &fe) {
			return 0, err
		}
		return 0, fmt.Errorf("postgres: the token check could not admit token %d for %q: %w", t, resource, err)
	}
	return bigint(resource, t)
}

// bigint converts t for a bigint column, refusing one it does not fit with
// an error wrapping a [*token.RangeError] and [token.ErrInvalid].
func bigint(resource string, t token.Token) (int64, error) {
	if t > maxToken {
		return 0, fmt.Errorf("postgres: token for %q: %w (%w)", resource, &token.RangeError{What: "PostgreSQL bigint", Token: t, Max: maxToken}, token.ErrInvalid)
	}
	return int64(t), nil
}

// resourceToken resolves the resource key and token of a table-mode call:
// an empty resource is the context's; a zero token is the context's only
// when the context carries it for this very resource ([enforce.Resolve]: a
// token means nothing against another lock's key, and the refusal names
// both). It then admits them ([admit]).
func resourceToken(ctx context.Context, check token.Check, resource string, t token.Token) (string, token.Token, int64, error) {
	if ck, _, ok := token.FromContext(ctx); resource == "" && ok {
		resource = ck
	}
	if err := lockMismatch(ctx, fmt.Sprintf("fenced transaction on %q", resource), resource, t, txHint); err != nil {
		return "", 0, 0, err
	}
	t, err := enforce.Resolve(ctx, resource, t)
	if err != nil {
		return "", 0, 0, fmt.Errorf("postgres: %w", err)
	}
	v, err := admit(ctx, check, resource, t)
	if err != nil {
		return "", 0, 0, err
	}
	return resource, t, v, nil
}

// checkIdentifier validates one part of an SQL name. Sanitize would drop a
// NUL byte silently and address another object.
func checkIdentifier(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("postgres: empty %s", what)
	case strings.ContainsRune(s, 0):
		return fmt.Errorf("postgres: %s %q contains a NUL byte", what, s)
	}
	return nil
}

// checkName validates a table name of one or two (schema, table) parts.
func checkName(what string, id pgx.Identifier) error {
	if len(id) == 0 || len(id) > 2 {
		return fmt.Errorf("postgres: %s must be [table] or [schema, table], got %d parts", what, len(id))
	}
	for _, p := range id {
		if err := checkIdentifier(what, p); err != nil {
			return err
		}
	}
	return nil
}

// quote returns a column name quoted for SQL.
func quote(column string) string { return pgx.Identifier{column}.Sanitize() }

// isSerializationFailure reports whether err is SQLSTATE 40001: under
// REPEATABLE READ or SERIALIZABLE, a statement that waited for a row a
// concurrent transaction then changed (or an SSI conflict).
func isSerializationFailure(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "40001"
}

// retriable reports whether a statement on db that failed with a
// serialization failure may be sent again: when db is not a transaction,
// the statement was a transaction of its own and nothing else went with
// it. (On a *pgx.Conn inside a transaction begun with a plain "BEGIN", the
// retry fails: the transaction is aborted.)
func retriable(db any, err error) bool {
	if !isSerializationFailure(err) {
		return false
	}
	_, inTx := db.(pgx.Tx)
	return !inTx
}

// maxSerializationRetries bounds the retries of a claim refused with a
// serialization failure. Each one means a concurrent transaction on the
// same mark committed meanwhile — progress elsewhere — so the bound only
// guards against a loop; the context ends the retries earlier.
const maxSerializationRetries = 100
