package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"strings"
	"time"
)

// migrations are the schema changes of the high-water table, applied in
// file name order. Each is idempotent on its own (IF NOT EXISTS), so
// Migrate simply runs them all. tokensPlaceholder stands for the table's
// quoted name.
//
//go:embed migrations/*.sql
var migrations embed.FS

const tokensPlaceholder = "{{.Tokens}}"

// migrationSQL returns the file names and statements of every migration,
// in order, for the table named table (quoted).
func migrationSQL(table string) (names, stmts []string, err error) {
	names, err = fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return nil, nil, err
	}
	stmts = make([]string, len(names))
	for i, name := range names { // fs.Glob sorts
		b, err := migrations.ReadFile(name)
		if err != nil {
			return nil, nil, err
		}
		stmts[i] = strings.ReplaceAll(string(b), tokensPlaceholder, table)
	}
	return names, stmts, nil
}

// migrateLock is the name of the lock (GET_LOCK) that serializes Migrate
// across processes. Named locks are server-wide, not per database: runs
// for different databases queue too, for the few milliseconds each takes.
const migrateLock = "fenceguard.migrate"

// defaultMigrateWait is how long Migrate waits for the lock when ctx has
// no deadline.
const defaultMigrateWait = time.Minute

// Migrate creates the default high-water table (fence_tokens in the
// connection's database). See [Tokens.Migrate].
func Migrate(ctx context.Context, db *sql.DB) error { return defaultTokens.Migrate(ctx, db) }

// Migrate creates k's table unless it exists. It is idempotent, and safe
// to run from several processes at once (each instance of a service at
// start-up): it takes the server's named lock "fenceguard.migrate"
// (GET_LOCK) on one connection first, so concurrent runs queue instead of
// racing on CREATE, and releases it on that connection. It waits for the
// lock until ctx's deadline, or a minute without one. MySQL commits DDL
// at once, so each statement of a migration stands on its own; each is
// written to be run again.
//
// A table that exists is kept, so Migrate then checks its token column:
// one that is not BIGINT UNSIGNED (a signed BIGINT, say, as PostgreSQL's
// enforcer uses) cannot hold every token, and is a [*SchemaError].
func (k *Tokens) Migrate(ctx context.Context, db *sql.DB) (err error) {
	if db == nil {
		return fmt.Errorf("%w: nil DB", ErrBadInput)
	}
	names, stmts, err := migrationSQL(k.table)
	if err != nil {
		return fmt.Errorf("mysql: migrate %s: %w", k.name, err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("mysql: migrate %s: %w", k.name, err)
	}
	defer conn.Close()
	wait := defaultMigrateWait
	if dl, ok := ctx.Deadline(); ok {
		wait = time.Until(dl)
	}
	// GET_LOCK's timeout is whole seconds; the context ends a wait
	// sooner (the driver closes the connection, and the session's lock
	// requests with it).
	secs := max(int64(math.Ceil(wait.Seconds())), 0)
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, ?)`, migrateLock, secs).Scan(&got); err != nil {
		return fmt.Errorf("mysql: migrate %s: lock %s: %w", k.name, migrateLock, err)
	}
	if !got.Valid || got.Int64 != 1 {
		return fmt.Errorf("mysql: migrate %s: lock %s not granted within %v: another migration holds it", k.name, migrateLock, wait.Round(time.Millisecond))
	}
	defer func() {
		// A fresh context: the caller's may be over, and the lock must go.
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, rerr := conn.ExecContext(rctx, `DO RELEASE_LOCK(?)`, migrateLock); rerr != nil {
			// The lock lives as long as its session: end the session.
			conn.Raw(func(any) error { return driver.ErrBadConn })
			err = errors.Join(err, fmt.Errorf("mysql: migrate %s: release lock %s (the connection was closed instead): %w", k.name, migrateLock, rerr))
		}
	}()
	for i, stmt := range stmts {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("mysql: migrate %s: %s: %w", k.name, names[i], err)
		}
	}
	// A table that existed was kept as it is: its token column must hold
	// every token, or outside strict sql_mode the server would store a
	// token beyond its range clipped, and a lower token pass the mark.
	var typ sql.NullString
	err = conn.QueryRowContext(ctx, `SELECT MAX(COLUMN_TYPE) FROM information_schema.COLUMNS
 WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ? AND COLUMN_NAME = 'token'`,
		k.schema, k.tableName).Scan(&typ)
	if err != nil {
		return fmt.Errorf("mysql: migrate %s: check the token column: %w", k.name, err)
	}
	if t := strings.ToLower(typ.String); !typ.Valid || !strings.HasPrefix(t, "bigint") || !strings.Contains(t, "unsigned") {
		return &SchemaError{Object: k.name,
			Err: fmt.Errorf("the existing table's token column is %q, which cannot hold every token", typ.String),
			Fix: "ALTER TABLE " + k.table + " MODIFY token BIGINT UNSIGNED NOT NULL"}
	}
	return nil
}
