package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Kinds of key column fit for tombstones.
const (
	keyInteger = 1 // an integer type: the key's decimal digits
	keyBytes   = 2 // compared byte for byte: the key's bytes
)

// Verify checks that the key column is fit for tombstones, which
// [Table.Delete] and [Table.Upsert]'s insert path need, and fails with a
// [*SchemaError] saying why when it is not. Delete and Upsert verify on
// first use; calling Verify at start-up reports an unfit column before
// the first write does.
//
// A tombstone names its key by text, so it must stand for exactly the
// keys the column holds as equal: integer columns (TINYINT to BIGINT,
// signed or not: the decimal digits) and columns compared byte for byte
// with no padding (VARBINARY, and CHAR or VARCHAR under a binary NO PAD
// collation such as MariaDB's utf8mb4_nopad_bin or MySQL's
// utf8mb4_0900_bin). Any other key column — a case-insensitive or
// accent-insensitive collation (the default ones), a PAD SPACE collation
// ('a' = 'a '), BINARY(n), decimals, dates — is refused: the row could
// otherwise be re-created under an older token in another spelling
// ("Alice" for "alice").
func (tb *Table) Verify(ctx context.Context, db DB) error {
	_, err := tb.verify(ctx, db)
	return err
}

func (tb *Table) verify(ctx context.Context, db DB) (int32, error) {
	if k := tb.keyKind.Load(); k != 0 {
		return k, nil
	}
	if db == nil {
		return 0, fmt.Errorf("%w: nil DB", ErrBadInput)
	}
	var typ string
	var coll sql.NullString
	err := db.QueryRowContext(ctx, `SELECT DATA_TYPE, COLLATION_NAME FROM information_schema.COLUMNS
 WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ? AND COLUMN_NAME = ?`,
		tb.schema, tb.tableName(), tb.rawKey).Scan(&typ, &coll)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, &SchemaError{Object: tb.name, Err: fmt.Errorf("no key column %s", tb.rawKey)}
	}
	if err != nil {
		return 0, tb.wrapErr("verify", tb.name, err)
	}
	typ = strings.ToLower(typ)
	var kind int32
	switch {
	case typ == "tinyint" || typ == "smallint" || typ == "mediumint" || typ == "int" || typ == "bigint":
		kind = keyInteger
	case typ == "varbinary":
		kind = keyBytes
	case (typ == "varchar" || typ == "char") && coll.Valid && noPadBinary(coll.String):
		kind = keyBytes
	default:
		c := ""
		if coll.Valid {
			c = " collation " + coll.String
		}
		return 0, &SchemaError{Object: tb.name,
			Err: fmt.Errorf("key column %s of type %s%s: its text does not name each key once, so tombstones cannot stand for deleted rows", tb.rawKey, typ, c),
			Fix: "key the table by an integer, a VARBINARY, or a VARCHAR under a binary NO PAD collation (utf8mb4_nopad_bin, utf8mb4_0900_bin) to use Delete and Upsert"}
	}
	tb.keyKind.Store(kind)
	return kind, nil
}

// noPadBinary reports whether a collation compares byte for byte without
// padding: MariaDB's *_nopad_bin, MySQL 8's utf8mb4_0900_bin, binary.
func noPadBinary(c string) bool {
	c = strings.ToLower(c)
	return strings.HasSuffix(c, "_nopad_bin") || c == "utf8mb4_0900_bin" || c == "binary"
}

// tableName is the table part of the configured Name.
func (tb *Table) tableName() string {
	if tb.schema != "" {
		return strings.TrimPrefix(tb.name, tb.schema+".")
	}
	return tb.name
}

// verifiedTombstone verifies the table's key column, then names key's
// tombstone.
func (tb *Table) verifiedTombstone(ctx context.Context, db DB, key any) (string, error) {
	kind, err := tb.verify(ctx, db)
	if err != nil {
		return "", err
	}
	return tb.tombstone(kind, key)
}

// tombstone returns the resource name of key's tombstone in the
// high-water table: "<table name>/<key's text>". kind is the key column's
// (from verify); a Go value whose text would not be the column's — a
// string for an integer column, a number for a string column — is
// refused with [ErrBadInput].
func (tb *Table) tombstone(kind int32, key any) (string, error) {
	v, err := plainKey(key)
	if err != nil {
		return "", err
	}
	var text string
	rv := reflect.ValueOf(v)
	switch {
	case kind == keyInteger && rv.CanInt():
		text = strconv.FormatInt(rv.Int(), 10)
	case kind == keyInteger && rv.CanUint():
		text = strconv.FormatUint(rv.Uint(), 10)
	case kind == keyBytes && rv.Kind() == reflect.String:
		text = rv.String()
	case kind == keyBytes && rv.Kind() == reflect.Slice && rv.Type().Elem().Kind() == reflect.Uint8:
		text = string(rv.Bytes())
	default:
		return "", fmt.Errorf("%w: key %v of Go type %T for the key column of %s: pass an integer for an integer column, a string or []byte for a string column", ErrBadInput, key, key, tb.name)
	}
	name := tb.name + "/" + text
	if err := checkResource(name); err != nil {
		return "", err
	}
	return name, nil
}

// plainKey unwraps pointers and driver.Valuers around key.
func plainKey(key any) (any, error) {
	for range 8 {
		if key == nil {
			return nil, fmt.Errorf("%w: nil key", ErrBadInput)
		}
		if v, ok := key.(driver.Valuer); ok {
			rv := reflect.ValueOf(key)
			if rv.Kind() == reflect.Pointer && rv.IsNil() {
				return nil, fmt.Errorf("%w: nil key", ErrBadInput)
			}
			val, err := v.Value()
			if err != nil {
				return nil, fmt.Errorf("%w: key %T: %v", ErrBadInput, key, err)
			}
			key = val
			continue
		}
		rv := reflect.ValueOf(key)
		if rv.Kind() != reflect.Pointer {
			return key, nil
		}
		if rv.IsNil() {
			return nil, fmt.Errorf("%w: nil key", ErrBadInput)
		}
		key = rv.Elem().Interface()
	}
	return nil, fmt.Errorf("%w: key %T nests too deep", ErrBadInput, key)
}

// beginner is what runs a transaction of this package's own: *sql.DB
// and *sql.Conn.
type beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// maxDeadlockRetries bounds how often a transaction of this package's own
// runs again after InnoDB chose it as a deadlock victim.
const maxDeadlockRetries = 8

// inTx runs fn on a transaction, so that fn's statements take effect
// together or not at all. On a *sql.Tx it is the caller's transaction:
// fn runs after a savepoint, and an error rolls back to it, so a refusal
// leaves nothing of fn behind (a deadlock rolls the caller's whole
// transaction back: the error wraps [ErrDeadlock]). Otherwise it is a
// transaction of its own on db, committed when fn returns nil, rolled
// back otherwise, and run again when InnoDB rolled it back as a deadlock
// victim.
func inTx(ctx context.Context, db DB, op string, fn func(DB) error) error {
	if tx, ok := db.(*sql.Tx); ok {
		if _, err := tx.ExecContext(ctx, `SAVEPOINT fenceguard`); err != nil {
			return fmt.Errorf("mysql: %s: savepoint: %w", op, err)
		}
		if err := fn(tx); err != nil {
			if !errors.Is(err, ErrDeadlock) {
				_, _ = tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT fenceguard`)
			}
			return err
		}
		if _, err := tx.ExecContext(ctx, `RELEASE SAVEPOINT fenceguard`); err != nil {
			return fmt.Errorf("mysql: %s: release savepoint: %w", op, err)
		}
		return nil
	}
	b, ok := db.(beginner)
	if !ok {
		return fmt.Errorf("%w: %s needs a transaction: pass a *sql.DB, *sql.Conn or *sql.Tx, not a %T", ErrBadInput, op, db)
	}
	return retryDeadlock(ctx, db, func() error {
		tx, err := b.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("mysql: %s: begin: %w", op, err)
		}
		if err := fn(tx); err != nil {
			_ = tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("mysql: %s: commit: %w", op, err)
		}
		return nil
	})
}

// retryDeadlock runs fn again while InnoDB rolls it back as a deadlock
// victim, unless db is a *sql.Tx: then the caller's whole transaction was
// rolled back, and only the caller can run it again.
func retryDeadlock(ctx context.Context, db DB, fn func() error) error {
	for retries := 0; ; retries++ {
		err := fn()
		if _, inTx := db.(*sql.Tx); inTx || !errors.Is(err, ErrDeadlock) || retries >= maxDeadlockRetries {
			return err
		}
		// A short random pause, growing, so that the victims do not meet
		// again in the same order.
		select {
		case <-time.After(time.Duration(rand.N(1<<min(retries, 6))) * time.Millisecond):
		case <-ctx.Done():
			return err
		}
	}
}
