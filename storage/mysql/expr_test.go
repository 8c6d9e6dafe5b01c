package mysql_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/storage/mysql"
)

// An Expr computes the new value from the row as it was, fenced like any
// assignment: refused, stale or condition false, it assigns nothing.
func TestTableUpdateExpr(t *testing.T) {
	db, items := newItems(t)
	ctx := ctxFor(t, time.Minute)
	// note reads stock before the Add changes it: "10", not "9".
	if err := items.Update(ctx, db, 1, 5, mysql.Set("note", mysql.Expr("CONCAT(?, stock)", "was ")), mysql.Add("stock", -1)); err != nil {
		t.Fatal(err)
	}
	if s, n, m := row(t, db); s != 9 || n.String != "was 10" || m != 5 {
		t.Fatalf("row: stock %d, note %q, mark %d; want 9, \"was 10\", 5", s, n.String, m)
	}
	if err := items.Update(ctx, db, 1, 5, mysql.Set("stock", mysql.Expr("stock * ? + LENGTH('stock')", 2))); err != nil {
		t.Fatal(err)
	}
	if s, _, _ := row(t, db); s != 23 {
		t.Fatalf("stock %d, want 9*2+5", s)
	}
	stale(t, items.Update(ctx, db, 1, 4, mysql.Set("stock", mysql.Expr("stock - ?", 1))), 4, 5)
	if err := items.Update(ctx, db, 1, 6, mysql.Set("stock", mysql.Expr("stock - ?", 1)), mysql.Where("stock > ?", 100)); !errors.Is(err, mysql.ErrCondition) {
		t.Fatalf("a false condition: %v, want ErrCondition", err)
	}
	if s, n, m := row(t, db); s != 23 || n.String != "was 10" || m != 6 {
		t.Fatalf("after refusals: stock %d, note %q, mark %d; want 23, \"was 10\", 6", s, n.String, m)
	}
}

// MySQL assigns left to right, so an Expr naming a column assigned before
// it (or the token column, assigned first) would read the new value: such
// an Update is refused before anything is sent, as are fragments that
// could reach outside their parentheses.
func TestTableUpdateExprRefused(t *testing.T) {
	db, items := newItems(t)
	ctx := ctxFor(t, time.Minute)
	for name, set := range map[string][]mysql.Clause{
		"a column assigned before":      {mysql.Add("stock", -1), mysql.Set("note", mysql.Expr("CONCAT(stock)"))},
		"qualified":                     {mysql.Set("stock", 1), mysql.Set("note", mysql.Expr("CONCAT(items.stock)"))},
		"backquoted, another case":      {mysql.Set("stock", 1), mysql.Set("note", mysql.Expr("CONCAT(`STOCK`)"))},
		"double-quoted (ANSI_QUOTES)":   {mysql.Set("stock", 1), mysql.Set("note", mysql.Expr(`CONCAT("stock")`))},
		"the token column":              {mysql.Set("note", mysql.Expr("CONCAT(fence_token)"))},
		"assigned twice":                {mysql.Set("note", "a"), mysql.Set("NOTE", "b")},
		"a backslash in a string":       {mysql.Set("note", mysql.Expr(`'\' OR 1 = 1 -- '`))},
		"a backslash in a Where string": {mysql.Set("note", "x"), mysql.Where(`note = '\' OR 1 = 1 -- '`)},
		"a semicolon":                   {mysql.Set("note", mysql.Expr("'a'; DELETE FROM items"))},
		"placeholders":                  {mysql.Set("note", mysql.Expr("CONCAT(?, ?)", "a"))},
		"an empty expression":           {mysql.Set("note", mysql.Expr(""))},
	} {
		if err := items.Update(ctx, db, 1, 5, set...); !errors.Is(err, mysql.ErrBadInput) {
			t.Errorf("%s: %v, want ErrBadInput", name, err)
		}
	}
	if s, n, m := row(t, db); s != 10 || n.Valid || m != 0 {
		t.Fatalf("after refusals: stock %d, note %+v, mark %d; want 10, NULL, 0", s, n, m)
	}
	// A string literal is a value, not a name.
	if err := items.Update(ctx, db, 1, 5, mysql.Set("stock", 1), mysql.Set("note", mysql.Expr("'stock'"))); err != nil {
		t.Fatalf("a literal spelled like an assigned column: %v", err)
	}
}
