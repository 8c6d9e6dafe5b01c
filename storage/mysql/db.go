package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	gomysql "github.com/go-sql-driver/mysql"
)

// DB is what this package needs of a connection to run one statement.
// [*sql.DB], [*sql.Conn] and [*sql.Tx] satisfy it, so each function runs
// on a pool, on one connection, or inside a transaction the caller
// already holds.
type DB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Errors of this package, tested with [errors.Is]. A stale token is a
// [*token.StaleError] (errors.Is(err, [token.ErrStale])); a zero token with
// none in the context wraps [token.ErrMissing]; an empty resource key is
// [token.ErrNoResource].
var (
	// ErrBadInput: an argument no call could succeed with (a nil DB, a
	// resource key longer than the high-water table holds, an unusable
	// table name). Nothing was sent to the server, or what was sent was
	// rolled back (a key its column cannot hold, found by
	// [Table.Upsert]'s insert).
	ErrBadInput = errors.New("mysql: bad input")
	// ErrSchema is what every [*SchemaError] unwraps to.
	ErrSchema = errors.New("mysql: schema not set up for fencing")
	// ErrDeadlock: InnoDB chose the statement's transaction as the victim
	// of a deadlock (error 1213) and rolled the whole transaction back, so
	// nothing of it was written. It is never a refusal of the token: retry
	// the transaction (a claim on its own, the statement). A claim on its
	// own locks one row of the high-water table and takes no other lock
	// while it waits, so it deadlocks only with claims inside
	// transactions that hold other rows.
	ErrDeadlock = errors.New("mysql: deadlock, transaction rolled back")
)

// SchemaError reports that the database lacks what a fenced statement
// needs: the high-water table ([Migrate]), the database it is in, a token
// column, or one of the type BIGINT UNSIGNED. The statement failed as a
// whole, or was not sent, so nothing was written. It unwraps to
// [ErrSchema] and to its cause, usually the server's
// [*gomysql.MySQLError].
type SchemaError struct {
	Object string // the table as configured, e.g. "fence_tokens"
	Err    error  // the cause
	// Fix says what sets the schema up; empty when the cause does not tell.
	Fix string
}

func (e *SchemaError) Error() string {
	if e.Fix == "" {
		return fmt.Sprintf("mysql: %s is not set up for fencing: %v", e.Object, e.Err)
	}
	return fmt.Sprintf("mysql: %s is not set up for fencing: %v; to fix: %s", e.Object, e.Err, e.Fix)
}

func (e *SchemaError) Unwrap() []error { return []error{ErrSchema, e.Err} }

// Server error numbers this package tells apart.
const (
	erBadDB        = 1049 // ER_BAD_DB_ERROR: unknown database
	erBadField     = 1054 // ER_BAD_FIELD_ERROR: unknown column
	erNoSuchTable  = 1146 // ER_NO_SUCH_TABLE
	erLockDeadlock = 1213 // ER_LOCK_DEADLOCK
)

// serverErr returns the server's error number in err, 0 if none.
func serverErr(err error) uint16 {
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// cutOff marks err, the failure of a statement on db, as of unknown
// outcome when ctx ended while the statement ran and the statement
// commits on its own (db is not a *sql.Tx): the driver closes the
// connection, but the server does not stop a statement whose client went
// away — a lock wait included — and applies it once it can. In a
// transaction the lost connection rolls the statement back with the rest.
func cutOff(ctx context.Context, db DB, err error) error {
	if _, inTx := db.(*sql.Tx); inTx || err == nil || ctx.Err() == nil {
		return err
	}
	return fmt.Errorf("%w (ctx ended while the statement ran: the server may still apply it): %w", ErrCommitUnknown, err)
}

// isDeadlock reports whether err is InnoDB's deadlock error.
func isDeadlock(err error) bool { return serverErr(err) == erLockDeadlock }
