package postgres

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// fragment renumbers placeholders outside quotes only, and refuses what
// the server could read differently.
func TestFragment(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in    string
		nargs int
		want  string // "" for refused
	}{
		{"stock - $1", 1, "stock - $5"},
		{"$2 * $1 + $2", 2, "$6 * $5 + $6"},
		{`'$1' || "$1" || $1`, 1, `'$1' || "$1" || $5`},
		{`'it''s' || "a""b"`, 0, `'it''s' || "a""b"`},
		{"f(g(stock), $1)::int", 1, "f(g(stock), $5)::int"},
		{"stock - $10", 10, ""}, // $1 … $9 unused
		{"stock$1", 1, ""},
		{"1$1", 1, ""},
		{"$1a", 1, ""},
		{"$1$", 1, ""},
		{"$$x$$", 0, ""},
		{"stock - - 1", 0, "stock - - 1"},
		{"stock--1", 0, ""},
		{"a /* b", 0, ""},
		{"(a))(", 0, ""},
		{"'a", 0, ""},
		{`"a`, 0, ""},
		{`'a\'`, 0, ""},
		{`a \ b`, 0, ""},
		{"a; b", 0, ""},
		{"';'", 0, "';'"},
		{"", 0, ""},
		{"$1", 0, ""},
	} {
		got, err := fragment(c.in, c.nargs, 5)
		switch {
		case c.want == "" && !errors.Is(err, ErrBadInput):
			t.Errorf("fragment(%q) = %q, %v; want refused", c.in, got, err)
		case c.want != "" && (err != nil || got != c.want):
			t.Errorf("fragment(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func TestIdentAt(t *testing.T) {
	t.Parallel()
	sql := `UPDATE "items" SET "St""ock" = 1, Stokc = 2, r.Nope = 3, "é" = 4, ö = 5`
	for _, c := range []struct{ at, want string }{
		{`"St""ock"`, `St"ock`}, {"Stokc", "stokc"}, {"r.Nope", "nope"}, {`"é"`, "é"}, {"ö", "ö"},
	} {
		pos := utf8.RuneCountInString(sql[:strings.Index(sql, c.at)]) + 1
		if got, ok := identAt(sql, pos); !ok || got != c.want {
			t.Errorf("identAt(%d) = %q %v, want %q", pos, got, ok, c.want)
		}
	}
}
