package demo

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// WriteTable writes the two runs side by side.
func WriteTable(w io.Writer, off, on *Result) {
	rows := []struct {
		label    string
		off, on  string
		emphasis bool
	}{
		{"units in stock", itoa(off.Initial), itoa(on.Initial), false},
		{"units sold", itoa(off.Sold), itoa(on.Sold), false},
		{"final stock", itoa(off.Final), itoa(on.Final), false},
		{"units oversold", itoa(off.Oversold()), itoa(on.Oversold()), true},
		{"stale writes rejected", itoa(off.Rejected), itoa(on.Rejected), false},
		{"throughput (units/s)", ftoa(off.Throughput()), ftoa(on.Throughput()), false},
	}
	fmt.Fprintf(w, "  %-24s %12s %12s\n", "", "fencing off", "fencing on")
	for _, r := range rows {
		line := fmt.Sprintf("  %-24s %12s %12s", r.label, r.off, r.on)
		if r.emphasis && r.off != r.on {
			line += "   <-"
		}
		fmt.Fprintln(w, line)
	}
}

// WriteCounters writes the fenceguard_* counters (package metrics/prom) of
// both runs: the workers' guards and the service's checks, summed over the
// processes. Series that stayed 0 in both runs are left out.
func WriteCounters(w io.Writer, off, on *Result) {
	keys := map[string]bool{}
	for k, v := range off.Counters {
		keys[k] = keys[k] || v != 0
	}
	for k, v := range on.Counters {
		keys[k] = keys[k] || v != 0
	}
	var names []string
	width := 0
	for k, nonzero := range keys {
		if nonzero {
			names = append(names, k)
			width = max(width, len(k))
		}
	}
	sort.Strings(names)
	fmt.Fprintln(w, "  counters (metrics/prom): the workers' guards (class sku), the service's")
	fmt.Fprintln(w, "  token checks (class sku: refused before any store) and the store's claims (class items)")
	fmt.Fprintf(w, "  %-*s %12s %12s\n", width, "", "fencing off", "fencing on")
	for _, k := range names {
		fmt.Fprintf(w, "  %-*s %12s %12s\n", width, k, ftoa(off.Counters[k]), ftoa(on.Counters[k]))
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// ftoa prints whole numbers as such, others with one decimal.
func ftoa(f float64) string {
	if f == float64(int64(f)) {
		return strconv.FormatInt(int64(f), 10)
	}
	return strings.TrimSuffix(strconv.FormatFloat(f, 'f', 1, 64), ".0")
}
