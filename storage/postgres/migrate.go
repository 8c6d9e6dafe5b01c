package postgres

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"strings"

	"github.com/jackc/pgx/v5"
)

// migrations are the schema changes of the high-water table, applied in
// file name order. Each is idempotent on its own (IF NOT EXISTS), so
// Migrate simply runs them all. tokensPlaceholder stands for the table's
// sanitized name: plain substitution, not text/template, whose reflection
// would keep the linker from dropping unused methods in every program
// that imports this package.
//
//go:embed migrations/*.sql
var migrations embed.FS

// tokensPlaceholder is replaced by the high-water table's sanitized name,
// schemaPlaceholder by its sanitized schema and a dot, or nothing when the
// table is found through the search_path.
const (
	tokensPlaceholder = "{{.Tokens}}"
	schemaPlaceholder = "{{.Schema}}"
)

// floorTrigger is the name of the trigger that checks inserted marks
// against the floor of pruned marks (migrations/0002_floor.sql).
const floorTrigger = "fenceguard_floor"

// migrationSQL returns the file names and statements of every migration,
// in order, for the table named table (sanitized) in schema (sanitized,
// with its dot; "" for the search_path).
func migrationSQL(table, schema string) (names, stmts []string, err error) {
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
		stmts[i] = strings.NewReplacer(tokensPlaceholder, table, schemaPlaceholder, schema).Replace(string(b))
	}
	return names, stmts, nil
}

// migrateLock is the key of the transaction-level advisory lock that
// serializes Migrate across processes ("fencegrd" in ASCII).
const migrateLock int64 = 0x66656e6365677264

// Migrate creates the default high-water table (fence_tokens on the
// search_path). See [Tokens.Migrate].
func Migrate(ctx context.Context, db DB) error { return defaultTokens.Migrate(ctx, db) }

// Migrate creates k's table, and its schema if k names one, unless they
// exist, and the trigger that checks new marks against the floor of
// pruned ones ([Tokens.Prune]; a function fenceguard_floor_check in the
// table's schema, and a trigger fenceguard_floor on the table). Run it
// again after upgrading fenceguard: Prune refuses to run on a table
// without the trigger. It is idempotent, and safe to run from several processes at once
// (each instance of a service at start-up): it runs in one transaction
// that first takes an advisory lock, so concurrent runs queue instead of
// racing on CREATE.
func (k *Tokens) Migrate(ctx context.Context, db DB) error {
	if db == nil {
		return fmt.Errorf("%w: nil DB", ErrBadInput)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: migrate %s: %w", k.name, err)
	}
	committed := false
	defer func() {
		if !committed {
			rollback(ctx, tx)
		}
	}()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLock); err != nil {
		return fmt.Errorf("postgres: migrate %s: %w", k.name, err)
	}
	if k.schema != "" {
		// Not CREATE SCHEMA IF NOT EXISTS: that needs the CREATE privilege
		// on the database even when the schema exists.
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)`, k.schema).Scan(&exists); err != nil {
			return fmt.Errorf("postgres: migrate %s: %w", k.name, err)
		}
		if !exists {
			if _, err := tx.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{k.schema}.Sanitize()); err != nil {
				return fmt.Errorf("postgres: migrate %s: %w", k.name, err)
			}
		}
	}
	schema := ""
	if k.schema != "" {
		schema = pgx.Identifier{k.schema}.Sanitize() + "."
	}
	names, stmts, err := migrationSQL(k.table, schema)
	if err != nil {
		return fmt.Errorf("postgres: migrate %s: %w", k.name, err)
	}
	for i, sql := range stmts {
		if _, err := tx.Exec(ctx, sql); err != nil {
			return fmt.Errorf("postgres: migrate %s: %s: %w", k.name, names[i], err)
		}
	}
	// The floor's trigger, unless it exists: CREATE TRIGGER locks the
	// table against every claim, which a service's start-up must not do
	// each time.
	var exists bool
	err = tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_trigger WHERE tgrelid = $1::text::regclass AND tgname = $2)`,
		k.table, floorTrigger).Scan(&exists)
	if err != nil {
		return fmt.Errorf("postgres: migrate %s: %w", k.name, err)
	}
	if !exists {
		_, err := tx.Exec(ctx, `CREATE TRIGGER `+floorTrigger+` AFTER INSERT ON `+k.table+
			` FOR EACH ROW EXECUTE FUNCTION `+schema+`fenceguard_floor_check()`)
		if err != nil {
			return fmt.Errorf("postgres: migrate %s: floor trigger: %w", k.name, err)
		}
	}
	committed = true
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: migrate %s: %w", k.name, err)
	}
	return nil
}

// AddTokenColumn adds the token column (bigint not null default 0) to the
// guarded table unless it has one, and checks that an existing one is
// bigint not null; if not, it returns a [*SchemaError]. It is idempotent.
// On PostgreSQL 11 and later the column is added without rewriting the
// table, but ALTER TABLE briefly takes an ACCESS EXCLUSIVE lock.
//
// Every existing row starts with the mark 0, so any token claims it.
func (tb *Table) AddTokenColumn(ctx context.Context, db DB) error {
	if db == nil {
		return fmt.Errorf("%w: nil DB", ErrBadInput)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: add token column to %s: %w", tb.name, err)
	}
	committed := false
	defer func() {
		if !committed {
			rollback(ctx, tx)
		}
	}()
	if _, err := tx.Exec(ctx, `ALTER TABLE `+tb.tbl+` ADD COLUMN IF NOT EXISTS `+tb.tok+` bigint NOT NULL DEFAULT 0`); err != nil {
		return tb.wrapErr("add token column to", "", err)
	}
	var typ string
	var notNull bool
	err = tx.QueryRow(ctx, `SELECT format_type(atttypid, atttypmod), attnotnull FROM pg_attribute
 WHERE attrelid = $1::text::regclass AND attname = $2 AND NOT attisdropped`, tb.tbl, tb.rawTok).Scan(&typ, &notNull)
	if err != nil {
		return tb.wrapErr("add token column to", "", err)
	}
	if typ != "bigint" || !notNull {
		null := " null"
		if notNull {
			null = " not null"
		}
		return &SchemaError{Object: tb.name, Err: fmt.Errorf("column %s is %s%s, want bigint not null", tb.rawTok, typ, null), Fix: tb.tokenTypeFix()}
	}
	committed = true
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: add token column to %s: %w", tb.name, err)
	}
	return nil
}
