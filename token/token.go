package token

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/fenceguard/fenceguard/token/internal/rule"
)

// Token is a fencing token. Successive grants of one lock carry strictly
// increasing tokens; the zero Token means "no token" and is never issued.
type Token uint64

// Header is the HTTP header that carries a token, in the form
// [Token.String] produces.
const Header = "X-Fencing-Token"

// maxDigits is the length of the largest uint64, 18446744073709551615.
const maxDigits = 20

// IsZero reports whether t is the zero token, which means "no token".
func (t Token) IsZero() bool { return t == 0 }

// String returns the wire form of t: its decimal digits. The zero token
// renders as "0", which [Parse] rejects.
func (t Token) String() string { return strconv.FormatUint(uint64(t), 10) }

// MarshalText implements [encoding.TextMarshaler] with the wire form.
func (t Token) MarshalText() ([]byte, error) {
	return strconv.AppendUint(nil, uint64(t), 10), nil
}

// UnmarshalText implements [encoding.TextUnmarshaler] with the rules of
// [Parse].
func (t *Token) UnmarshalText(b []byte) error {
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// ErrInvalid is the sentinel every [*SyntaxError] unwraps to.
var ErrInvalid = errors.New("invalid fencing token")

// ErrMissing means a token was required and none was present: the zero
// token, or a context that carries none.
var ErrMissing = rule.ErrMissing

// Why [Parse] rejected its input: [SyntaxError.Reason].
const (
	reasonEmpty       = "empty"
	reasonTooLong     = "longer than 20 digits"
	reasonNotDigit    = "not a decimal digit"
	reasonLeadingZero = "leading zero"
	reasonZero        = "zero is not a token"
	reasonOverflow    = "does not fit in 64 bits"
)

// SyntaxError is the error [Parse] returns. It unwraps to [ErrInvalid].
type SyntaxError struct {
	// Input is what was parsed, cut to its first 32 bytes.
	Input string
	// Reason says what was wrong with it, in words: "empty", "longer than
	// 20 digits", "not a decimal digit", "leading zero", "zero is not a
	// token" or "does not fit in 64 bits".
	Reason string
	// Offset is the byte offset of the first character that is not a
	// decimal digit; 0 for the other reasons.
	Offset int
}

func (e *SyntaxError) Error() string {
	// %q escapes control characters, so hostile input cannot forge log lines.
	if e.Reason == reasonNotDigit {
		return fmt.Sprintf("invalid fencing token %q: %s at offset %d", e.Input, e.Reason, e.Offset)
	}
	return fmt.Sprintf("invalid fencing token %q: %s", e.Input, e.Reason)
}

// Unwrap returns [ErrInvalid].
func (e *SyntaxError) Unwrap() error { return ErrInvalid }

// Parse reads the wire form of a token: one to twenty decimal digits, no
// sign, no spaces, no leading zeros, not zero, at most 2^64-1. Anything
// else is rejected with a [*SyntaxError].
func Parse(s string) (Token, error) {
	switch {
	case len(s) == 0:
		return 0, syntaxError(s, reasonEmpty, 0)
	case len(s) > maxDigits:
		return 0, syntaxError(s, reasonTooLong, 0)
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, syntaxError(s, reasonNotDigit, i)
		}
		d := uint64(c - '0')
		if n > (1<<64-1-d)/10 {
			return 0, syntaxError(s, reasonOverflow, 0)
		}
		n = n*10 + d
	}
	switch {
	case s[0] == '0' && len(s) > 1:
		return 0, syntaxError(s, reasonLeadingZero, 0)
	case n == 0:
		return 0, syntaxError(s, reasonZero, 0)
	}
	return Token(n), nil
}

func syntaxError(s string, r string, off int) error {
	const keep = 32
	if len(s) > keep {
		s = s[:keep]
	}
	return &SyntaxError{Input: s, Reason: r, Offset: off}
}
