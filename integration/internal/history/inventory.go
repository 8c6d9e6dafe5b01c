package history

import (
	"fmt"
	"sort"
)

// CheckInventory checks the stock of r: it never went below zero — in what
// any client read or wrote, in the resource's log, or at the end — and the
// units sold, the writes of the stock the resource accepted, are the units
// that left the stock, initial − final. A write whose outcome is unknown may
// count or not.
func CheckInventory(r *Resource) []Violation {
	var vs []Violation
	neg := func(where string, v int) {
		vs = append(vs, Violation{"inventory", fmt.Sprintf("stock %d below zero (%s)", v, where)})
	}
	sold, maybe := 0, 0
	for _, a := range r.Accesses {
		if a.Stock == nil {
			continue
		}
		if *a.Stock < 0 && (a.Kind == Read && a.Result == OK || a.Kind == Write && a.Result != Stale && a.Result != Failed) {
			neg(fmt.Sprintf("%s by c%d, op %s", a.Kind, a.Client, a.Op), *a.Stock)
		}
		if a.Kind != Write {
			continue
		}
		switch a.Result {
		case OK:
			sold++
		case Unknown:
			maybe++
		}
	}
	for _, e := range r.Log {
		if e.Stock < 0 {
			neg(fmt.Sprintf("resource log, seq %d", e.Seq), e.Stock)
		}
	}
	if r.Final.Stock < 0 {
		neg("final", r.Final.Stock)
	}
	left := r.Initial.Stock - r.Final.Stock
	switch {
	case left < sold:
		vs = append(vs, Violation{"inventory", fmt.Sprintf(
			"oversold by %d: %d units sold (writes accepted), but the stock went from %d to %d, %d left it",
			sold-left, sold, r.Initial.Stock, r.Final.Stock, left)})
	case left > sold+maybe:
		vs = append(vs, Violation{"inventory", fmt.Sprintf(
			"%d units lost: the stock went from %d to %d, but only %d units were sold (%d more maybe)",
			left-sold-maybe, r.Initial.Stock, r.Final.Stock, sold, maybe)})
	}
	return vs
}

// CheckTokens checks that the tokens r accepted never decrease in the
// resource's own order (its log's sequence), for each high-water mark
// (Accepted.Mark) on its own. Equal tokens are one holder accessing again.
// Entries without a token (seeding, a control's tokenless access) are
// skipped.
func CheckTokens(r *Resource) []Violation {
	log := append([]Accepted(nil), r.Log...)
	sort.SliceStable(log, func(i, j int) bool { return log[i].Seq < log[j].Seq })
	var vs []Violation
	high := map[string]Accepted{}
	for _, e := range log {
		if e.Token.IsZero() {
			continue
		}
		if h := high[e.Mark]; e.Token < h.Token {
			vs = append(vs, Violation{"tokens", fmt.Sprintf(
				"token went back: %s accepted (%s, seq %d) after %s (%s, seq %d)%s", e.Token, e.Kind, e.Seq, h.Token, h.Kind, h.Seq, markSuffix(e.Mark))})
			continue
		}
		high[e.Mark] = e
	}
	return vs
}

func markSuffix(mark string) string {
	if mark == "" {
		return ""
	}
	return " by " + mark
}
