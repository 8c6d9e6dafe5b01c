package mysql

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Expression is an SQL expression over the row, with its arguments: the
// new value of a column in [Set], made with [Expr].
type Expression struct {
	sql  string
	args []any
}

// Expr returns the SQL expression sql, whose placeholders ? stand for
// args, as the new value of a column: Set("price", Expr("ROUND(price *
// ?, 2)", 1.1)). Column references in it see the row as it was before the
// statement, as [Where] conditions do.
//
// MySQL and MariaDB assign columns left to right, each assignment seeing
// the ones before it: in UPDATE t SET a = a + 1, b = a, b gets the new a.
// So that an expression never reads a value the same Update just wrote,
// an Expr may not name a column assigned before it in the Update, nor the
// token column (which the Update assigns first): such an Update is
// refused with [ErrBadInput] before anything is sent. Put the assignment
// that reads a column before the one that changes it: Set("b", Expr("a")),
// Add("a", 1). The check is on the names in sql, so a function or alias
// spelled like an assigned column is refused too.
//
// sql is SQL text that runs on the server: write it as a constant in your
// code, never from user input. The arguments are values, sent as query
// parameters whatever they contain. So that a fragment stays one
// expression, one that could reach outside its parentheses is refused
// with [ErrBadInput] before anything is sent: unbalanced parentheses or
// quotes, a semicolon, a comment, a backslash, a NUL byte, or a count of
// ? (outside quotes) other than len(args). Literal strings in single
// quotes are fine; values belong in args.
func Expr(sql string, args ...any) Expression { return Expression{sql, args} }

// checkExpr checks an Expr assignment: a fragment that stays one
// expression, and names neither the token column nor a column assigned
// before it.
func (tb *Table) checkExpr(c Clause, assigned []string) error {
	if err := checkFragment("Expr", c.cond, len(c.args)); err != nil {
		return err
	}
	tok := strings.Trim(tb.tok, "`")
	for _, id := range fragmentNames(c.cond) {
		if strings.EqualFold(id, tok) {
			return fmt.Errorf("%w: Expr %q for %s reads the token column, which the Update has already set to the token", ErrBadInput, c.cond, c.column)
		}
		for _, a := range assigned {
			if strings.EqualFold(id, a) {
				return fmt.Errorf("%w: Expr %q for %s reads %s, assigned before it in the same Update (MySQL assigns left to right): assign %s after it", ErrBadInput, c.cond, c.column, a, a)
			}
		}
	}
	return nil
}

// fragmentNames returns the names in a fragment checkFragment accepted:
// bare words and backquoted identifiers, and the contents of double
// quotes (an identifier under sql_mode ANSI_QUOTES); single-quoted
// strings are values, not names.
func fragmentNames(s string) []string {
	var names []string
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\'' || c == '"' || c == '`':
			var b strings.Builder
			j := i + 1
			for ; j < len(s); j++ {
				if s[j] == c {
					if j+1 < len(s) && s[j+1] == c {
						b.WriteByte(c)
						j++
						continue
					}
					break
				}
				b.WriteByte(s[j])
			}
			if c != '\'' {
				names = append(names, b.String())
			}
			i = j + 1
		default:
			r, n := utf8.DecodeRuneInString(s[i:])
			if !isNameRune(r) {
				i += n
				continue
			}
			j := i
			for j < len(s) {
				r, n := utf8.DecodeRuneInString(s[j:])
				if !isNameRune(r) {
					break
				}
				j += n
			}
			names = append(names, s[i:j])
			i = j
		}
	}
	return names
}

// isNameRune reports whether r may be part of an unquoted identifier:
// letters, digits, _ and $, and any character beyond ASCII.
func isNameRune(r rune) bool {
	return r == '_' || r == '$' || r >= utf8.RuneSelf || unicode.IsLetter(r) || unicode.IsDigit(r)
}
