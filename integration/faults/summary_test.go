package faults

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// cellStats counts one cell's runs. Only the cell's goroutine writes it,
// and the summary reads it after every cell has ended.
type cellStats struct {
	Spec     cellSpec
	Runs     int // runs played to the end and checked
	Errors   int // runs whose schedule failed
	Faults   int // faults injected
	Enf      map[string]*enforcerStats
	Duration time.Duration
	Failed   bool
}

// enforcerStats counts, for one enforcer in one cell, the runs with a
// violation with fencing on (Fenced) and off (Control), those in which
// the fenced copy refused the victim's stale write, and the other accesses
// it refused: holders that lost their lease on their own (a slow renewal on
// a busy machine), refused safely.
//
// Inconclusive counts the runs whose control could not show the forced
// lost update because one of the two forced writes to it did not complete
// (a timeout, an error): not evidence either way, so not counted as a
// biting control; a cell fails when more than a tenth of its runs are.
type enforcerStats struct {
	Runs, Fenced, Control, Refused, HonestRefusals, Inconclusive int
}

// inconclusive names the enforcers with inconclusive controls, for the note.
func (c *cellStats) inconclusive() string {
	var n []string
	for _, e := range allEnforcers {
		if es := c.Enf[e]; es != nil && es.Inconclusive > 0 {
			n = append(n, fmt.Sprintf("%s %d", e, es.Inconclusive))
		}
	}
	return strings.Join(n, ", ")
}

func newCellStats(spec cellSpec) *cellStats {
	st := &cellStats{Spec: spec, Enf: map[string]*enforcerStats{}}
	for _, e := range allEnforcers {
		st.Enf[e] = &enforcerStats{}
	}
	return st
}

type summaryData struct {
	cells   []*cellStats
	elapsed time.Duration
	load    string // the load average when the suite started
}

func summary(cells []*cellStats, elapsed time.Duration, load string) summaryData {
	return summaryData{cells: cells, elapsed: elapsed, load: load}
}

// loadavg is the machine's 1, 5 and 15 minute load averages.
func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// header is the table's caption.
const header = "Each enforcer column: runs with a violation with fencing ON / with fencing OFF (the control). " +
	"Every run forces the stale holder's write, so the control must show one in every run, and fencing in none. " +
	"Refused: the stale writes the fenced copies refused, of those made (one per enforcer and run)."

func (s summaryData) text() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "fault-injection summary (%v)\n%s\n\n", s.elapsed.Round(time.Second), header)
	fmt.Fprintf(&b, "%-24s %5s %6s", "locker/nemesis", "runs", "faults")
	for _, e := range allEnforcers {
		fmt.Fprintf(&b, " %10s", e)
	}
	fmt.Fprintf(&b, " %9s %8s\n", "refused", "time")
	for _, c := range s.cells {
		fmt.Fprintf(&b, "%-24s %5d %6d", c.Spec, c.Runs, c.Faults)
		for _, e := range allEnforcers {
			es := c.Enf[e]
			fmt.Fprintf(&b, " %10s", fmt.Sprintf("%d / %d", es.Fenced, es.Control))
		}
		fmt.Fprintf(&b, " %9s %7.0fs%s\n", c.refused(), c.Duration.Seconds(), c.note())
	}
	return b.String()
}

// refused is how many of the victim's stale writes the fenced copies
// refused, of how many it made (one per enforcer and run).
func (c *cellStats) refused() string {
	n := 0
	for _, es := range c.Enf {
		n += es.Refused
	}
	return fmt.Sprintf("%d/%d", n, c.Runs*len(c.Enf))
}

func (c *cellStats) note() string {
	var n []string
	if c.Errors > 0 {
		n = append(n, fmt.Sprintf("%d runs failed", c.Errors))
	}
	if inc := c.inconclusive(); inc != "" {
		n = append(n, "controls inconclusive: "+inc)
	}
	if c.Failed {
		n = append(n, "FAILED")
	}
	if len(n) == 0 {
		return ""
	}
	return "  " + strings.Join(n, ", ")
}

func (s summaryData) markdown() string {
	var b bytes.Buffer
	b.WriteString("| locker / nemesis | runs | faults |")
	for _, e := range allEnforcers {
		fmt.Fprintf(&b, " %s |", e)
	}
	b.WriteString(" stale writes refused | time |\n|---|--:|--:|")
	for range allEnforcers {
		b.WriteString(":-:|")
	}
	b.WriteString("--:|--:|\n")
	for _, c := range s.cells {
		fmt.Fprintf(&b, "| %s | %d | %d |", c.Spec, c.Runs, c.Faults)
		for _, e := range allEnforcers {
			es := c.Enf[e]
			fmt.Fprintf(&b, " %d / %d |", es.Fenced, es.Control)
		}
		fmt.Fprintf(&b, " %s | %.0fs%s |\n", c.refused(), c.Duration.Seconds(), c.note())
	}
	return b.String()
}

// commandLine is the go test command line that produced this run, as far as
// the test binary can tell.
func commandLine() string {
	var args []string
	if os.Getenv("FENCEGUARD_REQUIRE_SERVERS") == "1" {
		args = append(args, "FENCEGUARD_REQUIRE_SERVERS=1")
	}
	args = append(args, "go", "test")
	if raceEnabled {
		args = append(args, "-race")
	}
	var pkgFlags []string
	flag.Visit(func(f *flag.Flag) {
		switch {
		case f.Name == "test.v" || f.Name == "test.paniconexit0" || f.Name == "test.timeout" || f.Name == "test.testlogfile" || f.Name == "test.gocoverdir":
		case strings.HasPrefix(f.Name, "test."):
			args = append(args, "-"+strings.TrimPrefix(f.Name, "test.")+"="+f.Value.String())
		case f.Name == "faults.doc" || f.Name == "faults.out":
			pkgFlags = append(pkgFlags, "-"+f.Name+"="+fromRoot(f.Value.String()))
		default:
			pkgFlags = append(pkgFlags, "-"+f.Name+"="+f.Value.String())
		}
	})
	args = append(args, "-v", "./integration/faults")
	return strings.Join(append(args, pkgFlags...), " ")
}

// fromRoot shows a path flag as typed from the module's root, where the
// command line above runs: go test runs the package in its own directory, so
// the path given was absolute (or relative to integration/faults).
func fromRoot(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return path
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return path
	}
	rel, err := filepath.Rel(root, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return path
	}
	return "$PWD/" + filepath.ToSlash(rel)
}

// Markers of the generated part of the Markdown file.
const (
	docBegin = "<!-- BEGIN generated by integration/faults (-faults.doc); do not edit by hand -->"
	docEnd   = "<!-- END generated -->"
)

// writeDoc replaces the generated part of the Markdown file at path with
// this summary, or appends one when the file has no markers.
func (s summaryData) writeDoc(path string) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "Produced %s by\n\n```sh\n%s\n```\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), commandLine())
	fmt.Fprintf(&b, "on %d CPUs (%s, %s; load before: %s), in %v for the package.\n\n",
		runtime.NumCPU(), runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH, s.load,
		s.elapsed.Round(time.Second))
	b.WriteString(header + "\n\n")
	b.WriteString(s.markdown())
	return replaceBlock(path, docBegin, docEnd, b.String())
}

// replaceBlock replaces what lies between the markers begin and end in the
// file at path with body, or appends the block when the file lacks them.
func replaceBlock(path, begin, end, body string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	block := begin + "\n\n" + body + "\n" + end
	doc := string(old)
	i := strings.Index(doc, begin)
	j := -1
	if i >= 0 {
		if k := strings.Index(doc[i:], end); k >= 0 {
			j = i + k
		}
	}
	if i >= 0 && j > i {
		doc = doc[:i] + block + doc[j+len(end):]
	} else {
		doc = strings.TrimRight(doc, "\n") + "\n\n" + block + "\n"
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}
