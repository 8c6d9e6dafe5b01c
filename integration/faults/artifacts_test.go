package faults

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness/timeline"
	"github.com/fenceguard/fenceguard/integration/internal/history"
)

// artifacts is where violations are written: for each, the histories as
// JSON, a timeline picture and, when the register check failed, porcupine's
// visualization. The directory is -faults.out; else, under -artifacts, the
// test's artifact directory; else a new directory in $TMPDIR that outlives
// the test (t.ArtifactDir without -artifacts is removed with the test).
type artifacts struct {
	mu   sync.Mutex
	base string
	said bool // guarded by mu: the directory was announced
	t    *testing.T
}

func newArtifacts(t *testing.T) *artifacts {
	base := *flagOut
	if base == "" {
		if f := flag.Lookup("test.artifacts"); f != nil && f.Value.String() == "true" {
			base = t.ArtifactDir()
		} else {
			base = filepath.Join(os.TempDir(), "fenceguard-faults-"+time.Now().Format("20060102-150405"))
		}
	}
	return &artifacts{base: base, t: t}
}

func (a *artifacts) dir(parts ...string) (string, error) {
	d := filepath.Join(append([]string{a.base}, parts...)...)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.said {
		a.said = true
		a.t.Logf("artifacts: %s", a.base)
	}
	return d, nil
}

// summary writes the summary table next to the artifacts, when there are
// any.
func (a *artifacts) summary(s summaryData) {
	a.mu.Lock()
	said := a.said
	a.mu.Unlock()
	if said {
		os.WriteFile(filepath.Join(a.base, "summary.txt"), []byte(s.text()), 0o644)
	}
}

// violationFile is history.json: everything about one enforcer's copies of
// one item in one run.
type violationFile struct {
	Cell       string              `json:"cell"`
	Run        int                 `json:"run"`
	Variant    string              `json:"variant"`
	Enforcer   string              `json:"enforcer"`
	Broken     bool                `json:"broken,omitempty"` // -faults.break named this enforcer
	TTL        string              `json:"ttl"`
	VictimOp   string              `json:"victim_op"`
	TakerOp    string              `json:"taker_op"`
	Faults     []faultWindow       `json:"faults"`
	Fenced     *history.Resource   `json:"fenced"`
	Violations []history.Violation `json:"violations"`
	Control    *history.Resource   `json:"control"`
	ControlVs  []history.Violation `json:"control_violations"`
	Events     []event             `json:"events"` // every event of every client in the run
}

// write writes the artifacts of enforcer's fenced violations in res — of
// every item, violated or not, with all — and returns their directory.
func (a *artifacts) write(t *testing.T, res *runResult, enforcer string, all bool) string {
	r := res.run
	d, err := a.dir(strings.ReplaceAll(r.c.spec.String(), "/", "-"), fmt.Sprintf("%s-%s", r.id, r.variant), enforcer)
	if err != nil {
		t.Errorf("artifacts: %v", err)
		return ""
	}
	for _, it := range r.items {
		key := copyName(enforcer, true) + "|" + it
		vs := res.violations[key]
		if len(vs) == 0 && !all {
			continue
		}
		fenced, control := res.histories[key], res.histories[copyName(enforcer, false)+"|"+it]
		f := violationFile{
			Cell: r.c.spec.String(), Run: r.n, Variant: r.variant, Enforcer: enforcer, Broken: enforcer == r.c.broken,
			TTL: r.c.ttl.String(), VictimOp: r.victimOp, TakerOp: r.takerOp, Faults: r.windows,
			Fenced: fenced, Violations: vs, Control: control, ControlVs: res.violations[copyName(enforcer, false)+"|"+it],
			Events: r.events,
		}
		if err := writeJSONFile(filepath.Join(d, it+".history.json"), f); err != nil {
			t.Errorf("artifacts: %v", err)
		}
		if err := writeFile(filepath.Join(d, it+".timeline.svg"), func(fh *os.File) error {
			return timeline.Write(fh, r.chart(it, fenced, vs, control, f.ControlVs))
		}); err != nil {
			t.Errorf("artifacts: %v", err)
		}
		for _, v := range vs {
			if v.Check == "register" {
				if err := writeFile(filepath.Join(d, it+".register.html"), func(fh *os.File) error {
					return history.VisualizeRegister(fenced, fh)
				}); err != nil {
					t.Errorf("artifacts: %v", err)
				}
				break
			}
		}
	}
	return d
}

func writeJSONFile(path string, v any) error {
	return writeFile(path, func(f *os.File) error {
		enc := json.NewEncoder(f)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	})
}

func writeFile(path string, fill func(*os.File) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fill(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// chart is the timeline of one item in a run: the fenced copy and its
// control, one panel each.
func (r *run) chart(item string, fenced *history.Resource, fvs []history.Violation, control *history.Resource, cvs []history.Violation) timeline.Chart {
	c := timeline.Chart{
		Title: fmt.Sprintf("fenceguard fault injection: %s under %s — run %d (%s), item %s",
			r.c.spec.locker, r.c.spec.nemesis, r.n, r.variant, item),
		Legend: timeline.Legend{
			Lease:   "lease held (its token)",
			Stale:   "c1 still thinks it holds the lock",
			Window:  "fault in effect",
			OK:      "a write the copy accepted",
			Refused: "an access refused: stale token",
		},
		Note: "c1, c2, c3 are client processes (memlock: goroutines of the test process), times from their own reports; the stock is the copy's own log.",
	}
	for _, h := range []struct {
		r  *history.Resource
		vs []history.Violation
	}{{fenced, fvs}, {control, cvs}} {
		if h.r != nil {
			c.Panels = append(c.Panels, r.panel(h.r, h.vs))
		}
	}
	return c
}

func (r *run) panel(h *history.Resource, vs []history.Violation) timeline.Panel {
	p := timeline.Panel{Title: "fencing ON", Start: r.start, Lanes: []string{"c1", "c2", "c3"}, Good: len(vs) == 0}
	if h.Fenced {
		p.Subtitle = h.Copy + ": every access carries the lease's token; the copy refuses tokens below its high-water mark"
		if h.Copy == r.c.broken {
			p.Subtitle = h.Copy + ": BROKEN ON PURPOSE (-faults.break): reads carry no token, only writes are fenced"
		}
	} else {
		p.Title = "fencing OFF"
		p.Subtitle = h.Copy + ", the control: the same clients, the same schedule; the copy trusts the lock"
	}
	p.Verdict = "no violation"
	if len(vs) > 0 {
		var s []string
		for _, v := range vs {
			s = append(s, v.Short())
		}
		p.Verdict = "VIOLATED: " + strings.Join(s, "; ")
	}

	// Leases: from each grant to the end of its critical section.
	type key struct {
		client int
		op     string
	}
	grants := map[key]event{}
	var ends []event
	for _, e := range r.events {
		switch e.Kind {
		case evAcquired:
			grants[key{e.Client, e.Op}] = e
		case evDone:
			ends = append(ends, e)
		}
	}
	for _, e := range ends {
		g, ok := grants[key{e.Client, e.Op}]
		if !ok || r.opItem[e.Op] != h.Item {
			continue
		}
		l := timeline.Lease{Lane: e.Client - 1, Token: g.Token.String(), Start: g.Time, End: e.Time}
		if e.Op == r.victimOp && !r.takeover.IsZero() {
			l.StaleFrom, l.HideToken = r.takeover, true
		}
		p.Leases = append(p.Leases, l)
	}
	for _, w := range r.windows {
		p.Windows = append(p.Windows, timeline.Window{Lane: w.Lane, Start: w.Start, End: w.End, Label: w.Label})
	}
	if !r.takeover.IsZero() {
		p.Markers = append(p.Markers, timeline.Marker{Time: r.takeover,
			Label: fmt.Sprintf("c1's lock (token %s) lost: c2 granted token %s", r.victimTok, r.takerTok)})
	}

	s := &timeline.Series{Label: "stock", Initial: h.Initial.Stock}
	log := append([]history.Accepted(nil), h.Log...)
	sort.Slice(log, func(i, j int) bool { return log[i].Seq < log[j].Seq })
	for _, e := range log {
		if e.Kind == history.Write {
			s.Points = append(s.Points, timeline.SeriesPoint{Time: e.Time, Value: e.Stock})
		}
	}
	for _, a := range h.Accesses {
		if a.Op == r.victimOp && a.Kind == history.Write {
			hl := &timeline.Highlight{Lane: a.Client - 1, Time: a.End, Accepted: a.Result == history.OK}
			switch a.Result {
			case history.OK:
				hl.Label = fmt.Sprintf("c1's stale write ACCEPTED: token %s sets stock %d", a.Token, deref(a.Stock))
				s.Shade = append(s.Shade, a.End)
			case history.Stale:
				hl.Label = fmt.Sprintf("c1's stale write REFUSED: token %s < %s", a.Token, a.Current)
			default:
				hl.Label = fmt.Sprintf("c1's stale write: %s (%s)", a.Result, a.Err)
			}
			p.Highlight = hl
			continue
		}
		switch {
		case a.Result == history.Stale:
			p.Points = append(p.Points, timeline.Point{Lane: a.Client - 1, Time: a.End, Refused: true})
		case a.Kind == history.Write && a.Result == history.OK:
			p.Points = append(p.Points, timeline.Point{Lane: a.Client - 1, Time: a.End})
		}
	}
	p.Series = s
	return p
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}
