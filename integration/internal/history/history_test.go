package history

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/token"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func ip(v int) *int       { return &v }
func sp(v string) *string { return &v }

// h builds histories access by access.
type h struct{ r Resource }

func newH(stock int, val string) *h {
	return &h{Resource{Copy: "pg-column", Item: "a", Fenced: true, Initial: State{stock, val}}}
}

func (h *h) read(c int, op string, tok token.Token, from, to int, stock int, val string) *h {
	h.r.Accesses = append(h.r.Accesses, Access{Client: c, Op: op, Kind: Read, Token: tok, Start: at(from), End: at(to),
		Stock: ip(stock), Val: sp(val), Result: OK})
	return h
}

func (h *h) write(c int, op string, tok token.Token, from, to int, stock *int, val *string, res Result) *h {
	h.r.Accesses = append(h.r.Accesses, Access{Client: c, Op: op, Kind: Write, Token: tok, Start: at(from), End: at(to),
		Stock: stock, Val: val, Result: res})
	return h
}

func (h *h) log(tok token.Token, kind string, stock int, val string) *h {
	h.r.Log = append(h.r.Log, Accepted{Seq: int64(len(h.r.Log) + 1), Token: tok, Kind: kind, Stock: stock, Val: val})
	return h
}

// marked logs an entry checked by the named high-water mark.
func (h *h) marked(mark string, tok token.Token, kind string) *h {
	h.r.Log = append(h.r.Log, Accepted{Mark: mark, Seq: int64(len(h.r.Log) + 1), Token: tok, Kind: kind})
	return h
}

func (h *h) final(stock int, val string) *Resource {
	h.r.Final, h.r.FinalAt = State{stock, val}, at(100000)
	return &h.r
}

// lateWrite is Kleppmann's schedule: c1 (token 5) reads, pauses past its
// lease; c2 (token 6) reads and writes; c1 wakes and writes what it computed
// before the pause. accepted says whether the resource took c1's write.
func lateWrite(accepted bool) *Resource {
	b := newH(10, "v0").
		read(1, "op1", 5, 0, 10, 10, "v0").log(5, Read, 10, "v0").
		read(2, "op2", 6, 2000, 2010, 10, "v0").log(6, Read, 10, "v0").
		write(2, "op2", 6, 2020, 2030, ip(9), sp("op2"), OK).log(6, Write, 9, "op2")
	if !accepted {
		return b.write(1, "op1", 5, 3000, 3010, ip(9), sp("op1"), Stale).final(9, "op2")
	}
	return b.write(1, "op1", 5, 3000, 3010, ip(9), sp("op1"), OK).log(5, Write, 9, "op1").final(9, "op1")
}

// writeBetween: c1 (5) reads and pauses; c2 (6) reads; c1 writes; c2 writes.
// With every access claiming, c1's write is refused; fencing only writes
// accepts both.
func writeBetween(accepted bool) *Resource {
	b := newH(10, "v0").
		read(1, "op1", 5, 0, 10, 10, "v0").log(5, Read, 10, "v0").
		read(2, "op2", 6, 2000, 2010, 10, "v0")
	if !accepted {
		b.log(6, Read, 10, "v0").write(1, "op1", 5, 3000, 3010, ip(9), sp("op1"), Stale)
		return b.write(2, "op2", 6, 4000, 4010, ip(9), sp("op2"), OK).log(6, Write, 9, "op2").final(9, "op2")
	}
	b.write(1, "op1", 5, 3000, 3010, ip(9), sp("op1"), OK).log(5, Write, 9, "op1")
	return b.write(2, "op2", 6, 4000, 4010, ip(9), sp("op2"), OK).log(6, Write, 9, "op2").final(9, "op2")
}

func checks(vs []Violation) string {
	var s []string
	for _, v := range vs {
		s = append(s, v.Check)
	}
	return strings.Join(s, ",")
}

func TestFencedHistoriesPass(t *testing.T) {
	for name, r := range map[string]*Resource{
		"late write refused":    lateWrite(false),
		"write between refused": writeBetween(false),
		"no accesses":           newH(3, "x").final(3, "x"),
		// Three holders one after the other, one of them a plain read.
		"sequential": newH(2, "v0").
			read(1, "a", 5, 0, 1, 2, "v0").write(1, "a", 5, 2, 3, ip(1), nil, OK).
			read(2, "b", 6, 4, 5, 1, "v0").write(2, "b", 6, 6, 7, nil, sp("b"), OK).
			read(3, "c", 7, 8, 9, 1, "b").
			log(5, Read, 2, "v0").log(5, Write, 1, "v0").log(6, Read, 1, "v0").log(6, Write, 1, "b").log(7, Read, 1, "b").
			final(1, "b"),
		// A middleware's mark, then the store's: c1 (5) passes the
		// middleware, c2 (6) passes it too, c1's effect reaches the store
		// first, then c2's. Each mark is monotone; their merge is not, and
		// need not be.
		"two marks": newH(5, "v").
			marked("middleware", 5, "claim").marked("middleware", 6, "claim").
			marked("column", 5, Read).marked("column", 6, Read).final(5, "v"),
	} {
		if vs := Check(r); len(vs) > 0 {
			t.Errorf("%s: %v", name, vs)
		}
	}
}

// Each checker fails on the history it exists for.
func TestViolationsAreFound(t *testing.T) {
	for _, c := range []struct {
		name string
		r    *Resource
		want string // the checks that must fail, in order
	}{
		// The late write undoes c2's sale and overwrites its value, with a
		// lower token than the resource had accepted.
		{"late write accepted", lateWrite(true), "inventory,register,tokens"},
		// Fencing only writes: both writes carry a token not below the
		// mark when they arrive, so the tokens look fine — but two sales
		// took one unit and c2 overwrote a value it never read.
		{"write between accepted", writeBetween(true), "inventory,register"},
		{"negative stock", newH(0, "v").read(1, "a", 5, 0, 1, 0, "v").
			write(1, "a", 5, 2, 3, ip(-1), nil, OK).log(5, Write, -1, "v").final(-1, "v"), "inventory,inventory,inventory"},
		{"stock lost", newH(5, "v").final(3, "v"), "inventory"},
		{"value from nowhere", newH(5, "v").read(1, "a", 5, 0, 1, 5, "w").final(5, "v"), "register"},
		{"token goes back", newH(5, "v").log(7, Read, 5, "v").log(6, Read, 5, "v").final(5, "v"), "tokens"},
		{"token goes back at one of two marks", newH(5, "v").
			marked("middleware", 6, "claim").marked("column", 7, Read).
			marked("middleware", 7, "claim").marked("column", 6, Read).final(5, "v"), "tokens"},
	} {
		if got := checks(Check(c.r)); got != c.want {
			t.Errorf("%s: violations %q, want %q: %v", c.name, got, c.want, Check(c.r))
		}
	}
}

// A write whose outcome is unknown may or may not have happened: both
// outcomes pass, and nothing else does.
func TestUnknownWrites(t *testing.T) {
	mk := func(finalStock int, finalVal string) *Resource {
		return newH(10, "v0").
			read(1, "a", 5, 0, 1, 10, "v0").write(1, "a", 5, 2, 3, ip(9), sp("a"), Unknown).
			read(2, "b", 6, 10, 11, 10, "v0").write(2, "b", 6, 12, 13, ip(9), sp("b"), OK).
			final(finalStock, finalVal)
	}
	// c1's write did not happen; c2 read 10 after it and sold one.
	if vs := Check(mk(9, "b")); len(vs) > 0 {
		t.Errorf("unknown write not done: %v", vs)
	}
	// Done or not, c2's sale took a unit.
	if got := checks(Check(mk(10, "b"))); got != "inventory" {
		t.Errorf("c2's sale left the stock at 10: %q", got)
	}
	// Had c1's write happened, it came before c2's read, which would
	// then have read "a".
	if got := checks(Check(mk(9, "a"))); got != "register" {
		t.Errorf("c1's value after c2's: %q", got)
	}
}

func TestVisualizeRegister(t *testing.T) {
	var b bytes.Buffer
	if err := VisualizeRegister(lateWrite(true), &b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "cas(") {
		t.Errorf("visualization lacks the operations")
	}
}
