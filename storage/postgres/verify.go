package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// KeyTypeError is the cause of the [*SchemaError] that [Table.Verify],
// [Table.Delete] and the insert path of [Table.Upsert] return for a key
// column that cannot name its rows' tombstones: a type (or collation)
// under which two values the unique index holds equal can have different
// text forms, or one value different text forms in different sessions.
// Test for it with [errors.As].
type KeyTypeError struct {
	Column    string // the key column, as configured
	Type      string // its type as PostgreSQL formats it, e.g. "citext", "numeric(10,2)"
	Collation string // its collation, when the type has one
	Reason    string // why its text form does not identify a key
}

func (e *KeyTypeError) Error() string {
	typ := e.Type
	if e.Collation != "" {
		typ += ` collate "` + e.Collation + `"`
	}
	return fmt.Sprintf("key column %q is %s: %s; a tombstone names its key by the key's text, which needs %s",
		e.Column, typ, e.Reason, canonicalTypes)
}

// canonicalTypes describes the key types tombstones accept.
const canonicalTypes = "smallint, integer, bigint, boolean, uuid, or text, varchar or char with a deterministic collation (or a domain over one of them)"

// canonicalKeyTypes are the built-in types (by OID, which is fixed for
// built-in types) whose text output is a function of the value alone —
// no session setting changes it — and one-to-one with their equality:
// equal values print alike, and different values differently. The
// character types are so only under a deterministic collation, which
// compares bytes.
var canonicalKeyTypes = map[uint32]bool{
	16:   true, // boolean
	20:   true, // bigint
	21:   true, // smallint
	23:   true, // integer
	25:   true, // text
	1042: true, // character (the text form drops the trailing blanks its equality ignores)
	1043: true, // character varying
	2950: true, // uuid
}

// charTypes are the canonical types whose equality follows a collation.
var charTypes = map[uint32]bool{25: true, 1042: true, 1043: true}

// refusedKeyTypes say why some common key types are refused.
var refusedKeyTypes = map[uint32]string{
	1700: "equal numerics print with different scales (1.0 and 1.00)",
	700:  "equal floats print differently (-0 and 0)",
	701:  "equal floats print differently (-0 and 0)",
	1082: "its text form depends on the session's DateStyle",
	1083: "fenceguard does not accept date and time types as tombstone keys",
	1114: "its text form depends on the session's DateStyle",
	1184: "its text form depends on the session's TimeZone and DateStyle (one instant, many spellings)",
	1266: "fenceguard does not accept date and time types as tombstone keys",
	1186: "its text form depends on the session's IntervalStyle, and equal intervals print differently (1 day and 24:00:00)",
	17:   "its text form depends on the session's bytea_output",
	790:  "its text form depends on the session's lc_monetary",
}

// verifySQL reads what Verify needs of the key column: its type as
// declared, its base type through any domains, its collation, and the
// nondeterministic collations of unique indexes on it alone. $1 is the
// sanitized table name, $2 the key column.
const verifySQL = `WITH RECURSIVE fenceguard_k AS (
 SELECT a.attnum, a.atttypid, a.attcollation, format_type(a.atttypid, a.atttypmod) AS typ
 FROM pg_attribute a WHERE a.attrelid = $1::text::regclass AND a.attname = $2 AND a.attnum > 0 AND NOT a.attisdropped),
fenceguard_b AS (
 SELECT t.oid, t.typtype, t.typbasetype FROM pg_type t JOIN fenceguard_k k ON t.oid = k.atttypid
 UNION ALL
 SELECT t.oid, t.typtype, t.typbasetype FROM pg_type t JOIN fenceguard_b b ON t.oid = b.typbasetype WHERE b.typtype = 'd')
SELECT k.typ, k.atttypid, b.oid, format_type(b.oid, NULL), coalesce(c.collname, ''), coalesce(c.collisdeterministic, true),
 (SELECT coalesce(string_agg(DISTINCT ic.collname, ', '), '') FROM pg_index i JOIN pg_collation ic ON ic.oid = i.indcollation[0]
  WHERE i.indrelid = $1::text::regclass AND i.indisunique AND i.indnkeyatts = 1 AND i.indkey[0] = k.attnum AND NOT ic.collisdeterministic)
FROM fenceguard_k k JOIN fenceguard_b b ON b.typtype <> 'd' LEFT JOIN pg_collation c ON c.oid = k.attcollation`

// Verify checks, in the catalog, that the key column can name the
// tombstones of deleted rows ([Table.Delete]): that its text form, which
// names a tombstone, identifies a key exactly the way the column's unique
// index compares keys, whatever the session. The types that can are
// smallint, integer, bigint, boolean, uuid, and text, varchar and char
// under a deterministic collation, and domains over them. Any other type
// is refused with a [*SchemaError] whose cause is a [*KeyTypeError]
// naming the column, its type and why — among them citext ('Alice' and
// 'alice' are one key), numeric (1.0 and 1.00), floating point (-0 and 0),
// dates and times (DateStyle, TimeZone), interval, bytea (bytea_output),
// nondeterministic collations (also on a unique index over the column),
// arrays, ranges, enums and composite types. A missing table or column is
// a [*SchemaError] too.
//
// [Table.Delete] and the insert path of [Table.Upsert] call Verify before
// their first statement; a service may call it at start-up to fail
// early. A success is remembered for the Table's lifetime (one catalog
// query per Table, not per call), so a later ALTER of the key column's
// type needs a new Table; a refusal is not remembered. Read and Update
// use no tombstone and work with any key type.
func (tb *Table) Verify(ctx context.Context, db DB) error {
	if tb.verified.Load() {
		return nil
	}
	if db == nil {
		return fmt.Errorf("%w: nil DB", ErrBadInput)
	}
	var (
		typ, baseName, coll, indexColls string
		typID, base                     uint32
		deterministic                   bool
	)
	err := db.QueryRow(ctx, verifySQL, tb.tbl, tb.rawKey).Scan(&typ, &typID, &base, &baseName, &coll, &deterministic, &indexColls)
	if errors.Is(err, pgx.ErrNoRows) {
		return &SchemaError{Object: tb.name, Err: fmt.Errorf("no key column %q", tb.rawKey), Fix: tb.keyColumnFix()}
	}
	if err != nil {
		return tb.wrapErr("verify", "", err)
	}
	kte := &KeyTypeError{Column: tb.rawKey, Type: typ}
	if charTypes[base] {
		kte.Collation = coll
	}
	switch {
	case !canonicalKeyTypes[base]:
		kte.Reason = refusedKeyTypes[base]
		if kte.Reason == "" && (baseName == "citext" || strings.HasSuffix(baseName, ".citext")) {
			kte.Reason = "it compares case-insensitively: 'Alice' and 'alice' are one key but print differently"
		}
		if kte.Reason == "" {
			kte.Reason = "fenceguard cannot tell that its text form names each key once"
		}
		if typID != base {
			kte.Reason = "a domain over " + baseName + ": " + kte.Reason
		}
	case charTypes[base] && !deterministic:
		kte.Reason = "the collation is nondeterministic: values it holds equal print differently ('Alice' and 'alice')"
	case charTypes[base] && indexColls != "":
		kte.Reason = fmt.Sprintf("a unique index on it compares under the nondeterministic collation %s: values it holds equal print differently", indexColls)
	default:
		tb.verified.Store(true)
		return nil
	}
	return &SchemaError{Object: tb.name, Err: kte, Fix: keyTypeFix}
}
