package demo

import (
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/fenceguard/fenceguard/examples/inventory/internal/worker"
	"github.com/fenceguard/fenceguard/harness/timeline"
	"github.com/fenceguard/fenceguard/token"
)

// WriteTimeline writes an SVG picture of runs, one panel each, on one time
// scale: a lane per worker with its leases (token on the bar where it fits),
// the victim's freeze, the moment its lease passed to another worker,
// every sale (a dot) and refusal (a cross), the victim's late write labelled
// with its token and what the service did with it, and the stock over time.
// The drawing is package harness/timeline's; this turns runs into its chart.
func WriteTimeline(w io.Writer, runs ...*Result) error {
	c := timeline.Chart{
		Title: "fenceguard inventory demo: worker w1 frozen with SIGSTOP between its read and its write",
		Legend: timeline.Legend{
			Lease:   "lease held (its token)",
			Stale:   fmt.Sprintf("w%d still thinks it holds the lock", victim),
			Window:  "process frozen (SIGSTOP)",
			OK:      "a sale (stock − 1 written)",
			Refused: "write refused: stale token",
		},
		Note: "Each worker is a separate process: lock sku:<item>, read the stock (claiming it with the token), work 100 ms, write stock − 1, release. Times from the workers' own reports.",
	}
	if len(runs) > 0 {
		if f := runs[0].Freeze; !f.End.IsZero() {
			c.Title += fmt.Sprintf(", for %.1fs (lease TTL %v)", f.End.Sub(f.Start).Seconds(), runs[0].TTL)
		}
	}
	workers := 0
	for _, r := range runs {
		for _, e := range r.Events {
			workers = max(workers, e.Worker)
		}
	}
	for _, r := range runs {
		c.Panels = append(c.Panels, r.panel(workers))
	}
	return timeline.Write(w, c)
}

// panel is run r as a timeline panel with lanes for workers 1 to workers.
func (r *Result) panel(workers int) timeline.Panel {
	f := r.Freeze
	p := timeline.Panel{
		Title:    "fencing OFF",
		Subtitle: "the service trusts the lock: plain SELECT, then UPDATE",
		Start:    r.Start,
		End:      r.lastEvent(),
	}
	if r.Fenced {
		p.Title, p.Good = "fencing ON", true
		p.Subtitle = "every access carries the lease's token; the service refuses tokens below the item's high-water mark"
	}
	if n := r.Oversold(); n > 0 {
		p.Verdict = fmt.Sprintf("%d units oversold: sold %d of %d", n, r.Sold, r.Initial)
	} else {
		p.Verdict = fmt.Sprintf("nothing oversold: sold %d of %d, %d stale write refused", r.Sold, r.Initial, r.Rejected)
	}
	for id := 1; id <= workers; id++ {
		p.Lanes = append(p.Lanes, fmt.Sprintf("w%d", id))
	}

	for _, l := range r.leases() {
		tl := timeline.Lease{Lane: l.worker - 1, Token: l.token.String(), Start: l.start, End: l.end}
		if l.worker == f.Worker && l.token == f.Token && !f.Start.IsZero() {
			tl.HideToken = true // the freeze's label names it
			if f.Takeover != nil {
				tl.StaleFrom = f.Takeover.Time
			}
		}
		p.Leases = append(p.Leases, tl)
	}
	if !f.Start.IsZero() {
		end := f.End
		if end.IsZero() {
			end = r.lastEvent()
		}
		p.Windows = append(p.Windows, timeline.Window{
			Lane: f.Worker - 1, Start: f.Start, End: end,
			Label: fmt.Sprintf("FROZEN (SIGSTOP) %.1fs — holds token %s, read stock %d", end.Sub(f.Start).Seconds(), f.Token, f.StockRead),
		})
		if f.Takeover != nil {
			p.Markers = append(p.Markers, timeline.Marker{
				Time:  f.Takeover.Time,
				Label: fmt.Sprintf("w%d's lease expired: w%d granted token %s", f.Worker, f.Takeover.Worker, f.Takeover.Token),
			})
		}
	}
	for _, e := range r.Events {
		if (e.Kind != worker.Wrote && e.Kind != worker.Refused) || (f.Write != nil && same(e, *f.Write)) {
			continue
		}
		p.Points = append(p.Points, timeline.Point{Lane: e.Worker - 1, Time: e.Time, Refused: e.Kind == worker.Refused})
	}

	s := &timeline.Series{Label: "stock", Initial: r.Initial}
	for _, e := range r.sortedEvents() {
		if e.Kind == worker.Wrote {
			s.Points = append(s.Points, timeline.SeriesPoint{Time: e.Time, Value: e.Stock})
		}
	}
	if f.Write != nil {
		e := *f.Write
		h := &timeline.Highlight{Lane: e.Worker - 1, Time: e.Time, Accepted: e.Kind == worker.Wrote}
		if h.Accepted {
			h.Label = fmt.Sprintf("stale write ACCEPTED: token %s sets stock %d (it was %d)", e.Token, e.Stock, stockBefore(r, e.Time))
			s.Shade = []time.Time{e.Time}
			s.Note = &timeline.SeriesPoint{Time: e.Time, Value: e.Stock,
				Text: fmt.Sprintf("back up to %d: the %d sales made while w%d was frozen are undone", e.Stock, f.Undone, f.Worker)}
		} else {
			h.Label = fmt.Sprintf("stale write REFUSED (409): token %s < %s", e.Token, e.Current)
		}
		p.Highlight = h
	}
	p.Series = s
	return p
}

type lease struct {
	worker     int
	token      token.Token
	start, end time.Time
}

// leases pairs each worker's grants with their end (release or loss).
func (r *Result) leases() []lease {
	open := map[int]*lease{}
	var out []lease
	for _, e := range r.sortedEvents() {
		switch e.Kind {
		case worker.Acquired:
			open[e.Worker] = &lease{worker: e.Worker, token: e.Token, start: e.Time}
		case worker.Released, worker.Lost:
			if l := open[e.Worker]; l != nil {
				l.end = e.Time
				out = append(out, *l)
				delete(open, e.Worker)
			}
		}
	}
	end := r.lastEvent()
	for _, l := range open {
		l.end = end
		out = append(out, *l)
	}
	return out
}

func (r *Result) sortedEvents() []worker.Event {
	evs := append([]worker.Event(nil), r.Events...)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].Time.Before(evs[j].Time) })
	return evs
}

func (r *Result) lastEvent() time.Time {
	last := r.Start
	for _, e := range r.Events {
		if e.Kind != worker.Counters && e.Time.After(last) {
			last = e.Time
		}
	}
	return last
}

func same(a, b worker.Event) bool {
	return a.Worker == b.Worker && a.Kind == b.Kind && a.Token == b.Token && a.Time.Equal(b.Time)
}

// stockBefore is the stock the last sale before t left.
func stockBefore(r *Result, t time.Time) int {
	cur := r.Initial
	for _, e := range r.sortedEvents() {
		if e.Kind == worker.Wrote && e.Time.Before(t) {
			cur = e.Stock
		}
	}
	return cur
}
