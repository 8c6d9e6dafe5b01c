package token

import (
	"database/sql/driver"
	"fmt"
	"strconv"
)

// Value implements [driver.Valuer], so that a Token is a query argument
// as it is, for a bigint (int8) column or any signed 64-bit one: pgx and
// database/sql send it as an int64. A token above [MaxInt64] is refused
// with a [*RangeError] rather than sent as a negative number; no locker
// of fenceguard grants one.
func (t Token) Value() (driver.Value, error) {
	if t > MaxInt64 {
		return nil, &RangeError{What: "SQL bigint", Token: t, Max: MaxInt64}
	}
	return int64(t), nil
}

// Scan implements [database/sql.Scanner] (pgx uses it too), so that a
// bigint column scans into a *Token as it is: a mark, or a token a
// fenced write stored. It takes the integer or its decimal text; 0 (a
// token column's default: no mark yet) scans as the zero Token. NULL, a
// negative number and anything else are refused with an error wrapping
// [ErrInvalid], and t is left unchanged.
func (t *Token) Scan(src any) error {
	var v uint64
	switch s := src.(type) {
	case int64:
		if s < 0 {
			return fmt.Errorf("%w: cannot scan %d, a negative number, into a Token", ErrInvalid, s)
		}
		v = uint64(s)
	case uint64:
		v = s
	case []byte:
		return t.scanText(string(s))
	case string:
		return t.scanText(s)
	case nil:
		return fmt.Errorf("%w: cannot scan NULL into a Token (the token column is not null default 0)", ErrInvalid)
	default:
		return fmt.Errorf("%w: cannot scan %T into a Token", ErrInvalid, src)
	}
	*t = Token(v)
	return nil
}

func (t *Token) scanText(s string) error {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: cannot scan %q into a Token", ErrInvalid, s)
	}
	*t = Token(v)
	return nil
}
