package token_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/enforce"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseAccepts(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want token.Token
	}{
		{"1", 1},
		{"9", 9},
		{"10", 10},
		{"1700000000000000", 1700000000000000},
		{"18446744073709551615", math.MaxUint64}, // the largest, 20 digits
		{"9999999999999999999", 9999999999999999999},
	} {
		got, err := token.Parse(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
		if got.String() != tc.in {
			t.Errorf("Parse(%q).String() = %q", tc.in, got.String())
		}
	}
}

func TestParseRejectsHostileInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want string
	}{
		// Nothing at all: a header present but empty.
		{"empty", "", "empty"},
		// The zero token means "none" and is never issued.
		{"zero", "0", "zero is not a token"},
		// "00" is zero with a leading zero; either way never valid.
		{"double zero", "00", "leading zero"},
		// Leading zeros would give one token two spellings.
		{"leading zero", "042", "leading zero"},
		{"plus sign", "+42", "not a decimal digit"},
		{"minus sign", "-42", "not a decimal digit"},
		{"leading space", " 42", "not a decimal digit"},
		{"trailing space", "42 ", "not a decimal digit"},
		{"trailing newline", "42\n", "not a decimal digit"},
		// A CRLF could split an HTTP header or forge a log line.
		{"header injection", "42\r\nX-Admin: 1", "not a decimal digit"},
		{"NUL byte", "4\x002", "not a decimal digit"},
		{"hex", "0x2a", "not a decimal digit"},
		{"exponent", "1e9", "not a decimal digit"},
		{"decimal point", "42.0", "not a decimal digit"},
		{"digit grouping", "1_000", "not a decimal digit"},
		{"comma list", "1,2", "not a decimal digit"},
		// Unicode digits are digits to unicode.IsDigit, not to us.
		{"arabic-indic digits", "٤٢", "not a decimal digit"},
		{"fullwidth digits", "４２", "not a decimal digit"},
		{"invalid UTF-8", "4\xff2", "not a decimal digit"},
		// 2^64 is one past the largest.
		{"2^64", "18446744073709551616", "does not fit in 64 bits"},
		{"20 nines", "99999999999999999999", "does not fit in 64 bits"},
		{"21 digits", "100000000000000000000", "longer than 20 digits"},
		{"very long", strings.Repeat("9", 10000), "longer than 20 digits"},
		{"long with leading zeros", strings.Repeat("0", 25) + "1", "longer than 20 digits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := token.Parse(tc.in)
			if err == nil {
				t.Fatalf("Parse(%q) = %d, want an error", tc.in, got)
			}
			if got != 0 {
				t.Errorf("Parse(%q) returned token %d with its error", tc.in, got)
			}
			if !errors.Is(err, token.ErrInvalid) {
				t.Errorf("error %v does not unwrap to ErrInvalid", err)
			}
			var se *token.SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("error %T is not a *SyntaxError", err)
			}
			if se.Reason != tc.want {
				t.Errorf("reason %q, want %q", se.Reason, tc.want)
			}
			if len(se.Input) > 32 {
				t.Errorf("error keeps %d bytes of input, want at most 32", len(se.Input))
			}
			if strings.ContainsAny(err.Error(), "\r\n\x00") {
				t.Errorf("error message carries raw control characters: %q", err.Error())
			}
		})
	}
}

func TestSyntaxErrorOffset(t *testing.T) {
	_, err := token.Parse("12x4")
	var se *token.SyntaxError
	if !errors.As(err, &se) || se.Offset != 2 {
		t.Fatalf("Parse(\"12x4\") = %v, want \"not a decimal digit\" at offset 2", err)
	}
	if want := `invalid fencing token "12x4": not a decimal digit at offset 2`; err.Error() != want {
		t.Errorf("message %q, want %q", err.Error(), want)
	}
}

func TestTextRoundTrip(t *testing.T) {
	var tok token.Token
	if err := tok.UnmarshalText([]byte("123")); err != nil || tok != 123 {
		t.Fatalf("UnmarshalText(123) = %d, %v", tok, err)
	}
	b, _ := tok.MarshalText()
	if string(b) != "123" {
		t.Errorf("MarshalText = %q", b)
	}
	tok = 7
	if err := tok.UnmarshalText([]byte("-1")); !errors.Is(err, token.ErrInvalid) || tok != 7 {
		t.Errorf("UnmarshalText(-1) = %v and left %d, want ErrInvalid and 7 unchanged", err, tok)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"1", "42", "0", "007", "-1", "+1", " 1", "18446744073709551615",
		"18446744073709551616", "99999999999999999999", "1e3", "٤", "\x00", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := token.Parse(s)
		// The reference: strconv's reading, narrowed to the wire form's rules.
		ref, refErr := strconv.ParseUint(s, 10, 64)
		canonical := refErr == nil && ref != 0 && strconv.FormatUint(ref, 10) == s
		if err != nil {
			if canonical {
				t.Fatalf("Parse(%q) rejected a canonical token: %v", s, err)
			}
			if !errors.Is(err, token.ErrInvalid) || tok != 0 {
				t.Fatalf("Parse(%q) = %d, %v: want 0 and an ErrInvalid", s, tok, err)
			}
			return
		}
		if !canonical || uint64(tok) != ref {
			t.Fatalf("Parse(%q) accepted %d, strconv says %d, %v", s, tok, ref, refErr)
		}
		if tok.String() != s {
			t.Fatalf("round trip: Parse(%q).String() = %q", s, tok.String())
		}
		again, err := token.Parse(tok.String())
		if err != nil || again != tok {
			t.Fatalf("round trip: Parse(%q) = %d, %v", tok.String(), again, err)
		}
	})
}

func TestStaleError(t *testing.T) {
	var err error = &token.StaleError{Resource: "sku:1", Presented: 5, Current: 6}
	if !errors.Is(err, token.ErrStale) {
		t.Error("StaleError does not unwrap to ErrStale")
	}
	if errors.Is(err, token.ErrInvalid) {
		t.Error("StaleError matches ErrInvalid")
	}
	want := `stale fencing token for "sku:1": presented 5, resource has seen 6`
	if err.Error() != want {
		t.Errorf("message %q, want %q", err.Error(), want)
	}
}

func BenchmarkNewContext(b *testing.B) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		c := token.NewContext(ctx, "sku:1", 42)
		if _, tok, _ := token.FromContext(c); tok != 42 {
			b.Fatal(tok)
		}
	}
}

func TestContextKeepsParent(t *testing.T) {
	type k struct{}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), k{}, "v"))
	ctx := token.NewContext(parent, "sku:1", 1)
	if ctx.Value(k{}) != "v" {
		t.Error("parent's value lost")
	}
	child, stop := context.WithCancel(ctx)
	defer stop()
	cancel()
	<-child.Done() // cancellation still propagates through the token node
	if ctx.Err() == nil {
		t.Error("token context not cancelled with its parent")
	}
}

func TestContextCarriesEveryHeldKey(t *testing.T) {
	ctx := token.NewContext(context.Background(), "acct:1", 7)
	ctx = token.NewContext(ctx, "acct:2", 9)
	if k, tok, _ := token.FromContext(ctx); k != "acct:2" || tok != 9 {
		t.Errorf("FromContext = %q %d, want the innermost, acct:2 9", k, tok)
	}
	for key, want := range map[string]token.Token{"acct:1": 7, "acct:2": 9} {
		if got, err := enforce.Resolve(ctx, key, 0); err != nil || got != want {
			t.Errorf("Resolve(%q, 0) = %d, %v; want %d", key, got, err, want)
		}
	}
	if got, err := enforce.Resolve(ctx, "acct:1", 3); err != nil || got != 3 {
		t.Errorf("an explicit token = %d, %v; want it kept", got, err)
	}
	_, err := enforce.Resolve(ctx, "acct:3", 0)
	if !errors.Is(err, token.ErrMissing) || !strings.Contains(err.Error(), `"acct:3"`) {
		t.Errorf("Resolve of a key not carried: %v, want ErrMissing naming it", err)
	}
	// A nested hold of the same key (re-entrancy) answers the inner token.
	if got, _ := enforce.Resolve(token.NewContext(ctx, "acct:1", 8), "acct:1", 0); got != 8 {
		t.Errorf("nested hold resolved %d, want the innermost, 8", got)
	}
}

func TestLookupFindsEveryHeldKey(t *testing.T) {
	ctx := token.NewContext(token.NewContext(context.Background(), "a", 1), "b", 2)
	for key, want := range map[string]token.Token{"a": 1, "b": 2} {
		if got, ok := token.Lookup(ctx, key); !ok || got != want {
			t.Errorf("Lookup(%q) = %d, %v; want %d", key, got, ok, want)
		}
	}
	if got, ok := token.Lookup(ctx, "c"); ok || got != 0 {
		t.Errorf("Lookup of a key not held = %d, %v", got, ok)
	}
	if _, ok := token.Lookup(context.Background(), "a"); ok {
		t.Error("Lookup found a token in a context without one")
	}
}
