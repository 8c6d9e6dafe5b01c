package demo

import (
	"bytes"
	"fmt"
	"html"
	"io"
	"math"
	"sort"
	"time"

	"github.com/fenceguard/fenceguard/examples/inventory/internal/worker"
	"github.com/fenceguard/fenceguard/token"
)

// Layout of the timeline, in SVG user units (pixels).
const (
	tlWidth    = 1200
	tlLeft     = 64 // lane labels
	tlRight    = 24 // margin
	tlLaneH    = 30 // one worker
	tlBarH     = 16 // a lease bar
	tlStockH   = 56 // the stock chart under the lanes
	tlPanelTop = 64 // panel title, subtitle and the lease-expired label
	tlAxisH    = 26 // time axis under a panel
	tlGap      = 22 // between panels
	tlFont     = "DejaVu Sans, Helvetica, Arial, sans-serif"
	tlCharW    = 5.6 // width of a character at font size 10, roughly
)

// Colours.
const (
	cLease      = "#9ecae1" // a lease, valid
	cLeaseEdge  = "#3182bd"
	cStale      = "#fdae6b" // the victim's lease after it expired
	cStaleEdge  = "#e6550d"
	cFrozen     = "#636363"
	cOK         = "#31a354"
	cBad        = "#de2d26"
	cGrid       = "#e5e5e5"
	cText       = "#252525"
	cMuted      = "#737373"
	cStockLine  = "#08519c"
	cStockBadBg = "#fee0d2"
)

// WriteTimeline writes an SVG picture of runs, one panel each, on one time
// scale: a lane per worker with its leases (token on the bar where it fits),
// the victim's freeze, the moment its lease passed to another worker,
// every sale (a dot) and refusal (a cross), the victim's late write labelled
// with its token and what the service did with it, and the stock over time.
func WriteTimeline(w io.Writer, runs ...*Result) error {
	var span time.Duration
	workers := 0
	for _, r := range runs {
		span = max(span, r.lastEvent().Sub(r.Start))
		for _, e := range r.Events {
			workers = max(workers, e.Worker)
		}
	}
	span = time.Duration(math.Ceil(span.Seconds())) * time.Second
	if span <= 0 {
		span = time.Second
	}
	panelH := tlPanelTop + workers*tlLaneH + tlStockH + tlAxisH
	height := 44 + len(runs)*(panelH+tlGap) + 44

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s" font-size="10">`+"\n",
		tlWidth, height, tlWidth, height, tlFont)
	b.WriteString(`<defs><pattern id="frozen" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">` +
		`<rect width="6" height="6" fill="#d9d9d9"/><line x1="0" y1="0" x2="0" y2="6" stroke="` + cFrozen + `" stroke-width="2.5"/></pattern></defs>` + "\n")
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", tlWidth, height)
	title := "fenceguard inventory demo: worker w1 frozen with SIGSTOP between its read and its write"
	if len(runs) > 0 {
		if f := runs[0].Freeze; !f.End.IsZero() {
			title += fmt.Sprintf(", for %.1fs (lease TTL %v)", f.End.Sub(f.Start).Seconds(), runs[0].ttl())
		}
	}
	text(&b, tlLeft, 24, 15, "bold", cText, "start", title)

	y := 44
	for _, r := range runs {
		drawPanel(&b, r, y, span, workers)
		y += panelH + tlGap
	}
	drawLegend(&b, y)
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// x maps a time of run r to the picture.
func xOf(r *Result, span time.Duration, t time.Time) float64 {
	plot := float64(tlWidth - tlLeft - tlRight)
	return tlLeft + plot*t.Sub(r.Start).Seconds()/span.Seconds()
}

type lease struct {
	worker     int
	token      token.Token
	start, end time.Time
	lost       bool
}

func drawPanel(b *bytes.Buffer, r *Result, top int, span time.Duration, workers int) {
	x := func(t time.Time) float64 { return xOf(r, span, t) }
	f := r.Freeze
	lanesTop := top + tlPanelTop
	laneY := func(id int) int { return lanesTop + (id-1)*tlLaneH }
	stockTop := lanesTop + workers*tlLaneH
	axisY := stockTop + tlStockH

	// Title and verdict.
	name, verdict, colour := "fencing OFF", "", cBad
	if r.Fenced {
		name, colour = "fencing ON", cOK
	}
	if n := r.Oversold(); n > 0 {
		verdict = fmt.Sprintf("%d units oversold: sold %d of %d", n, r.Sold, r.Initial)
	} else {
		verdict = fmt.Sprintf("nothing oversold: sold %d of %d, %d stale write refused", r.Sold, r.Initial, r.Rejected)
	}
	text(b, tlLeft, float64(top+16), 13, "bold", cText, "start", name)
	text(b, tlLeft+tlCharW*1.3*float64(len(name))+12, float64(top+16), 13, "bold", colour, "start", verdict)
	sub := "the service trusts the lock: plain SELECT, then UPDATE"
	if r.Fenced {
		sub = "every access carries the lease's token; the service refuses tokens below the item's high-water mark"
	}
	text(b, tlLeft, float64(top+31), 10, "normal", cMuted, "start", sub)

	// Grid: a line per second.
	for s := 0; s <= int(span.Seconds()); s++ {
		gx := x(r.Start.Add(time.Duration(s) * time.Second))
		line(b, gx, float64(lanesTop), gx, float64(axisY), cGrid, 1, "")
		text(b, gx, float64(axisY+14), 10, "normal", cMuted, "middle", fmt.Sprintf("%ds", s))
	}

	// Lanes.
	for id := 1; id <= workers; id++ {
		ly := laneY(id)
		if id%2 == 0 {
			fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#fafafa"/>`+"\n", tlLeft, ly, tlWidth-tlLeft-tlRight, tlLaneH)
		}
		label := fmt.Sprintf("w%d", id)
		text(b, tlLeft-10, float64(ly+tlLaneH/2+4), 11, "bold", cText, "end", label)
	}

	// Leases.
	var victimLease *lease
	for _, l := range r.leases() {
		ly := laneY(l.worker) + (tlLaneH-tlBarH)/2
		x0, x1 := x(l.start), math.Max(x(l.end), x(l.start)+1.5)
		isVictim := l.worker == f.Worker && l.token == f.Token && !f.Start.IsZero()
		if isVictim && f.Takeover != nil {
			ll := l
			victimLease = &ll
			xt := x(f.Takeover.Time)
			rect(b, x0, float64(ly), xt-x0, tlBarH, cLease, cLeaseEdge)
			rect(b, xt, float64(ly), x1-xt, tlBarH, cStale, cStaleEdge)
		} else {
			rect(b, x0, float64(ly), x1-x0, tlBarH, cLease, cLeaseEdge)
		}
		if tok := l.token.String(); x1-x0 >= 4.6*float64(len(tok))+2 && !isVictim {
			text(b, (x0+x1)/2, float64(ly+tlBarH-5), 8, "normal", cText, "middle", tok)
		}
	}

	// The frozen window over the victim's bar, labelled.
	if !f.Start.IsZero() {
		ly := laneY(f.Worker)
		end := f.End
		if end.IsZero() {
			end = r.lastEvent()
		}
		fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="url(#frozen)" opacity="0.45"/>`+"\n",
			x(f.Start), ly+3, x(end)-x(f.Start), tlLaneH-6)
		label := fmt.Sprintf("FROZEN (SIGSTOP) %.1fs — holds token %s, read stock %d", end.Sub(f.Start).Seconds(), f.Token, f.StockRead)
		mid := (x(f.Start) + x(end)) / 2
		textBox(b, mid, float64(ly+tlLaneH/2+4), 10, "bold", cText, label)
		if victimLease != nil {
			// "lease expired" marker where another worker was granted the lock.
			xt := x(f.Takeover.Time)
			line(b, xt, float64(lanesTop-16), xt, float64(stockTop), cStaleEdge, 1.5, "5,3")
			textBox(b, xt+4, float64(lanesTop-5), 10, "bold", cStaleEdge,
				fmt.Sprintf("w%d's lease expired: w%d granted token %s", f.Worker, f.Takeover.Worker, f.Takeover.Token), "start")
		}
	}

	// Sales and refusals.
	for _, e := range r.Events {
		ly := float64(laneY(e.Worker) + tlLaneH/2)
		switch e.Kind {
		case worker.Wrote:
			if f.Write != nil && same(e, *f.Write) {
				continue
			}
			// On the bar's lower edge, clear of the token.
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s" stroke="white" stroke-width="0.8"/>`+"\n", x(e.Time), ly+tlBarH/2, cOK)
		case worker.Refused:
			if f.Write != nil && same(e, *f.Write) {
				continue
			}
			cross(b, x(e.Time), ly, 4, cBad)
		}
	}

	// The victim's late write, labelled.
	if f.Write != nil {
		e := *f.Write
		wx, wy := x(e.Time), float64(laneY(e.Worker)+tlLaneH/2)
		var label string
		if e.Kind == worker.Wrote {
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="6" fill="%s" stroke="white" stroke-width="1.5"/>`+"\n", wx, wy, cBad)
			label = fmt.Sprintf("stale write ACCEPTED: token %s sets stock %d (it was %d)", e.Token, e.Stock, stockBefore(r, e.Time))
		} else {
			cross(b, wx, wy, 7, cBad)
			label = fmt.Sprintf("stale write REFUSED (409): token %s < %s", e.Token, e.Current)
		}
		textBox(b, wx+10, wy+4, 11, "bold", cBad, label, "start")
	}

	// Stock over time.
	line(b, tlLeft, float64(stockTop), float64(tlWidth-tlRight), float64(stockTop), "#bdbdbd", 1, "")
	text(b, tlLeft-10, float64(stockTop+tlStockH/2+4), 11, "bold", cText, "end", "stock")
	sy := func(v int) float64 {
		top := max(r.Initial, r.maxStock())
		return float64(stockTop+tlStockH-6) - float64(v)*float64(tlStockH-14)/float64(top)
	}
	pts := fmt.Sprintf("%.1f,%.1f", x(r.Start), sy(r.Initial))
	cur := r.Initial
	for _, e := range r.sortedEvents() {
		if e.Kind != worker.Wrote {
			continue
		}
		pts += fmt.Sprintf(" %.1f,%.1f %.1f,%.1f", x(e.Time), sy(cur), x(e.Time), sy(e.Stock))
		cur = e.Stock
	}
	pts += fmt.Sprintf(" %.1f,%.1f", x(r.lastEvent()), sy(cur))
	if f.Write != nil && f.Write.Kind == worker.Wrote {
		wx := x(f.Write.Time)
		fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", wx-3, stockTop+2, 6.0, tlStockH-4, cStockBadBg)
	}
	fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="1.5"/>`+"\n", pts, cStockLine)
	text(b, tlLeft+4, sy(r.Initial)-3, 9, "normal", cMuted, "start", fmt.Sprintf("%d", r.Initial))
	text(b, x(r.lastEvent())+4, sy(cur)+3, 9, "normal", cMuted, "start", fmt.Sprintf("%d", cur))
	if f.Write != nil && f.Write.Kind == worker.Wrote {
		text(b, x(f.Write.Time)+6, sy(f.Write.Stock)-3, 10, "bold", cBad, "start",
			fmt.Sprintf("back up to %d: the %d sales made while w%d was frozen are undone", f.Write.Stock, f.Undone, f.Worker))
	}
}

func drawLegend(b *bytes.Buffer, y int) {
	lx := float64(tlLeft)
	ly := float64(y + 8)
	rect(b, lx, ly, 22, 10, cLease, cLeaseEdge)
	text(b, lx+28, ly+9, 10, "normal", cText, "start", "lease held (its token)")
	lx += 160
	rect(b, lx, ly, 22, 10, cStale, cStaleEdge)
	text(b, lx+28, ly+9, 10, "normal", cText, "start", "w1 still thinks it holds the lock")
	lx += 210
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="22" height="10" fill="url(#frozen)"/>`+"\n", lx, ly)
	text(b, lx+28, ly+9, 10, "normal", cText, "start", "process frozen (SIGSTOP)")
	lx += 170
	fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", lx+6, ly+5, cOK)
	text(b, lx+14, ly+9, 10, "normal", cText, "start", "a sale (stock − 1 written)")
	lx += 165
	cross(b, lx+6, ly+5, 4, cBad)
	text(b, lx+14, ly+9, 10, "normal", cText, "start", "write refused: stale token")
	text(b, tlLeft, ly+28, 10, "normal", cMuted, "start",
		"Each worker is a separate process: lock sku:<item>, read the stock (claiming it with the token), work 100 ms, write stock − 1, release. Times from the workers' own reports.")
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
				l.end, l.lost = e.Time, e.Kind == worker.Lost
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

func (r *Result) maxStock() int {
	m := 0
	for _, e := range r.Events {
		if e.Kind == worker.Wrote {
			m = max(m, e.Stock)
		}
	}
	return m
}

func (r *Result) ttl() time.Duration { return r.TTL }

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

func text(b *bytes.Buffer, x, y float64, size int, weight, fill, anchor, s string) {
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="%d" font-weight="%s" fill="%s" text-anchor="%s">%s</text>`+"\n",
		x, y, size, weight, fill, anchor, html.EscapeString(s))
}

// textBox is text on a white box, so it stays readable over bars and grid.
func textBox(b *bytes.Buffer, x, y float64, size int, weight, fill, s string, anchor ...string) {
	a := "middle"
	if len(anchor) > 0 {
		a = anchor[0]
	}
	w := float64(len([]rune(s))) * tlCharW * float64(size) / 10
	if weight == "bold" {
		w *= 1.08
	}
	bx := x - w/2
	switch a {
	case "start":
		bx = x
	case "end":
		bx = x - w
	}
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%d" rx="2" fill="white" opacity="0.9"/>`+"\n",
		bx-3, y-float64(size)-1, w+6, size+5)
	text(b, x, y, size, weight, fill, a, s)
}

func rect(b *bytes.Buffer, x, y, w float64, h int, fill, stroke string) {
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%d" rx="2" fill="%s" stroke="%s" stroke-width="0.8"/>`+"\n",
		x, y, math.Max(w, 0), h, fill, stroke)
}

func line(b *bytes.Buffer, x1, y1, x2, y2 float64, stroke string, width float64, dash string) {
	d := ""
	if dash != "" {
		d = ` stroke-dasharray="` + dash + `"`
	}
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%.1f"%s/>`+"\n", x1, y1, x2, y2, stroke, width, d)
}

func cross(b *bytes.Buffer, x, y, r float64, stroke string) {
	fmt.Fprintf(b, `<path d="M%.1f %.1fL%.1f %.1fM%.1f %.1fL%.1f %.1f" stroke="%s" stroke-width="2.5" stroke-linecap="round"/>`+"\n",
		x-r, y-r, x+r, y+r, x-r, y+r, x+r, y-r, stroke)
}
