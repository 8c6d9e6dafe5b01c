package token_test

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"math"
	"testing"

	"github.com/fenceguard/fenceguard/token"
)

var (
	_ driver.Valuer = token.Token(0)
	_ sql.Scanner   = (*token.Token)(nil)
)

// A Token is stored as a signed 64-bit integer: up to MaxInt64 as itself,
// above it refused with a RangeError rather than wrapped to a negative.
func TestTokenValue(t *testing.T) {
	for _, tk := range []token.Token{1, 12345, token.MaxInt64} {
		v, err := tk.Value()
		if err != nil || v != int64(tk) {
			t.Errorf("Token(%d).Value() = %v, %v", tk, v, err)
		}
	}
	for _, tk := range []token.Token{token.MaxInt64 + 1, math.MaxUint64} {
		v, err := tk.Value()
		var re *token.RangeError
		if !errors.As(err, &re) || !errors.Is(err, token.ErrRange) || re.Token != tk || re.Max != token.MaxInt64 || v != nil {
			t.Errorf("Token(%d).Value() = %v, %v, want a RangeError", tk, v, err)
		}
	}
}

// A column scans into a Token from what drivers hand over: int64,
// uint64, or the decimal text; 0 is the zero Token. NULL, negatives and
// other types are refused, the Token unchanged.
func TestTokenScan(t *testing.T) {
	for _, c := range []struct {
		src  any
		want token.Token
	}{
		{int64(0), 0},
		{int64(42), 42},
		{int64(math.MaxInt64), token.MaxInt64},
		{uint64(math.MaxUint64), math.MaxUint64},
		{[]byte("42"), 42},
		{"18446744073709551615", math.MaxUint64},
	} {
		tk := token.Token(7)
		if err := tk.Scan(c.src); err != nil || tk != c.want {
			t.Errorf("Scan(%#v) = %d, %v, want %d", c.src, tk, err, c.want)
		}
	}
	for _, src := range []any{nil, int64(-1), int64(math.MinInt64), "", "-1", "1e3", " 1", "18446744073709551616", []byte("x"), 1.5, true} {
		tk := token.Token(7)
		if err := tk.Scan(src); !errors.Is(err, token.ErrInvalid) || tk != 7 {
			t.Errorf("Scan(%#v) = %d, %v, want ErrInvalid and the Token unchanged", src, tk, err)
		}
	}
}
