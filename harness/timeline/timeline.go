package timeline

import (
	"bytes"
	"fmt"
	"html"
	"io"
	"math"
	"sort"
	"time"
)

// Chart is a picture of one or more runs on one time scale, one panel each,
// top to bottom.
type Chart struct {
	Title  string
	Panels []Panel
	Legend Legend
	// Note is a line of small print under the legend: where the times come
	// from, what a lane is.
	Note string
}

// Legend gives the text of each legend entry; an empty text leaves the entry
// out.
type Legend struct {
	Lease   string // a lease bar, e.g. "lease held (its token)"
	Stale   string // the part of a lease after it passed to another client
	Window  string // a fault window, e.g. "process frozen (SIGSTOP)"
	OK      string // an accepted access, e.g. "a sale (stock − 1 written)"
	Refused string // a refused access, e.g. "write refused: stale token"
}

// Panel is one run.
type Panel struct {
	Title    string // e.g. "fencing OFF"
	Verdict  string // next to the title, green when Good, else red
	Good     bool
	Subtitle string    // one line under the title
	Start    time.Time // time 0 of the axis
	// End is where the value series stops; zero means the latest time of
	// anything in the panel.
	End       time.Time
	Lanes     []string // lane labels, top to bottom; elements name lanes by index
	Leases    []Lease
	Windows   []Window
	Markers   []Marker
	Points    []Point
	Highlight *Highlight
	Series    *Series
}

// Lease is a bar on a lane from Start to End, labelled with its token where
// the label fits.
type Lease struct {
	Lane       int
	Token      string
	Start, End time.Time
	// StaleFrom, when set, is when the lease passed to another client
	// while its holder still believed it held it: the bar turns orange
	// from there on.
	StaleFrom time.Time
	// HideToken leaves the token off the bar (a label elsewhere names it).
	HideToken bool
}

// Window is a fault in effect from Start to End — a process frozen, a
// connection cut, a server down — hatched over one lane, or over all lanes
// when Lane is negative, with Label in its middle.
type Window struct {
	Lane       int
	Start, End time.Time
	Label      string
}

// Marker is a dashed vertical line across the lanes with Label at its top:
// the moment a lease passed to another client.
type Marker struct {
	Time  time.Time
	Label string
}

// Point is an access: a green dot when accepted, a red cross when refused.
type Point struct {
	Lane    int
	Time    time.Time
	Refused bool
}

// Highlight is the access the picture is about, drawn large and labelled:
// a red dot when the resource accepted it, a red cross when it refused it.
type Highlight struct {
	Lane     int
	Time     time.Time
	Accepted bool
	Label    string
}

// Series is a value over time under the lanes, e.g. the stock of an item.
type Series struct {
	Label   string
	Initial int
	Points  []SeriesPoint // the value from each Time on
	// Shade marks times where the value went wrong (a stale write
	// accepted), with a red band.
	Shade []time.Time
	// Note is a label at one point of the series.
	Note *SeriesPoint
}

// SeriesPoint is a value from a time on; Text is used by Series.Note only.
type SeriesPoint struct {
	Time  time.Time
	Value int
	Text  string
}

// Layout, in SVG user units (pixels).
const (
	width    = 1200
	left     = 64 // lane labels
	right    = 24 // margin
	laneH    = 30 // one lane
	barH     = 16 // a lease bar
	seriesH  = 56 // the value chart under the lanes
	panelTop = 64 // panel title, subtitle and the marker label
	axisH    = 26 // time axis under a panel
	gap      = 22 // between panels
	font     = "DejaVu Sans, Helvetica, Arial, sans-serif"
	charW    = 5.6 // width of a character at font size 10, roughly
)

// Colours.
const (
	cLease      = "#9ecae1" // a lease, valid
	cLeaseEdge  = "#3182bd"
	cStale      = "#fdae6b" // a lease after it passed to another client
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

// Write writes c as an SVG document to w.
func Write(w io.Writer, c Chart) error {
	var span time.Duration
	for i := range c.Panels {
		span = max(span, c.Panels[i].end().Sub(c.Panels[i].Start))
	}
	step := tickStep(span)
	span = time.Duration(math.Ceil(float64(span)/float64(step))) * step
	if span <= 0 {
		span = step
	}
	height := 44 + 44
	for i := range c.Panels {
		height += c.Panels[i].height() + gap
	}

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s" font-size="10">`+"\n",
		width, height, width, height, font)
	b.WriteString(`<defs><pattern id="frozen" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">` +
		`<rect width="6" height="6" fill="#d9d9d9"/><line x1="0" y1="0" x2="0" y2="6" stroke="` + cFrozen + `" stroke-width="2.5"/></pattern></defs>` + "\n")
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	text(&b, left, 24, 15, "bold", cText, "start", c.Title)

	y := 44
	for i := range c.Panels {
		c.Panels[i].draw(&b, y, span, step)
		y += c.Panels[i].height() + gap
	}
	drawLegend(&b, y, c.Legend, c.Note)
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// tickStep is the grid's step: the smallest of a few round steps that
// leaves at most 20 lines (tenths of a second only for runs under 2s).
func tickStep(span time.Duration) time.Duration {
	for _, s := range []time.Duration{100 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute} {
		if span <= 20*s {
			return s
		}
	}
	return time.Duration(math.Ceil(span.Minutes()/20)) * time.Minute
}

func (p *Panel) height() int {
	h := panelTop + len(p.Lanes)*laneH + axisH
	if p.Series != nil {
		h += seriesH
	}
	return h
}

// end is the latest time of anything in the panel, or End when set.
func (p *Panel) end() time.Time {
	if !p.End.IsZero() {
		return p.End
	}
	last := p.Start
	later := func(t time.Time) {
		if t.After(last) {
			last = t
		}
	}
	for _, l := range p.Leases {
		later(l.End)
	}
	for _, w := range p.Windows {
		later(w.End)
	}
	for _, m := range p.Markers {
		later(m.Time)
	}
	for _, pt := range p.Points {
		later(pt.Time)
	}
	if p.Highlight != nil {
		later(p.Highlight.Time)
	}
	if p.Series != nil {
		for _, sp := range p.Series.Points {
			later(sp.Time)
		}
	}
	return last
}

func (p *Panel) draw(b *bytes.Buffer, top int, span, step time.Duration) {
	plot := float64(width - left - right)
	x := func(t time.Time) float64 { return left + plot*t.Sub(p.Start).Seconds()/span.Seconds() }
	lanesTop := top + panelTop
	laneY := func(lane int) int { return lanesTop + lane*laneH }
	seriesTop := lanesTop + len(p.Lanes)*laneH
	axisY := seriesTop
	if p.Series != nil {
		axisY += seriesH
	}
	end := p.end()

	// Title and verdict.
	colour := cBad
	if p.Good {
		colour = cOK
	}
	text(b, left, float64(top+16), 13, "bold", cText, "start", p.Title)
	text(b, left+charW*1.3*float64(len(p.Title))+12, float64(top+16), 13, "bold", colour, "start", p.Verdict)
	text(b, left, float64(top+31), 10, "normal", cMuted, "start", p.Subtitle)

	// Grid.
	for s := time.Duration(0); s <= span; s += step {
		gx := x(p.Start.Add(s))
		line(b, gx, float64(lanesTop), gx, float64(axisY), cGrid, 1, "")
		label := fmt.Sprintf("%ds", int(s.Seconds()))
		if step < time.Second {
			label = fmt.Sprintf("%.1fs", s.Seconds())
		}
		text(b, gx, float64(axisY+14), 10, "normal", cMuted, "middle", label)
	}

	// Lanes.
	for i, name := range p.Lanes {
		ly := laneY(i)
		if i%2 == 1 {
			fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#fafafa"/>`+"\n", left, ly, width-left-right, laneH)
		}
		text(b, left-10, float64(ly+laneH/2+4), 11, "bold", cText, "end", name)
	}

	// Leases.
	for _, l := range p.Leases {
		ly := laneY(l.Lane) + (laneH-barH)/2
		x0, x1 := x(l.Start), math.Max(x(l.End), x(l.Start)+1.5)
		if !l.StaleFrom.IsZero() {
			xt := math.Min(math.Max(x(l.StaleFrom), x0), x1)
			rect(b, x0, float64(ly), xt-x0, barH, cLease, cLeaseEdge)
			rect(b, xt, float64(ly), x1-xt, barH, cStale, cStaleEdge)
		} else {
			rect(b, x0, float64(ly), x1-x0, barH, cLease, cLeaseEdge)
		}
		if !l.HideToken && x1-x0 >= 4.6*float64(len(l.Token))+2 {
			text(b, (x0+x1)/2, float64(ly+barH-5), 8, "normal", cText, "middle", l.Token)
		}
	}

	// Fault windows, labelled.
	for _, w := range p.Windows {
		y0, h := lanesTop+3, len(p.Lanes)*laneH-6
		labelY := float64(lanesTop + len(p.Lanes)*laneH/2 + 4)
		if w.Lane >= 0 {
			y0, h = laneY(w.Lane)+3, laneH-6
			labelY = float64(laneY(w.Lane) + laneH/2 + 4)
		}
		wend := w.End
		if wend.IsZero() {
			wend = end
		}
		fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="url(#frozen)" opacity="0.45"/>`+"\n",
			x(w.Start), y0, math.Max(x(wend)-x(w.Start), 1), h)
		if w.Label != "" {
			textBox(b, (x(w.Start)+x(wend))/2, labelY, 10, "bold", cText, w.Label)
		}
	}

	// Markers: where a lease passed to another client.
	for _, m := range p.Markers {
		xt := x(m.Time)
		line(b, xt, float64(lanesTop-16), xt, float64(seriesTop), cStaleEdge, 1.5, "5,3")
		besideBox(b, xt, 4, float64(lanesTop-5), 10, cStaleEdge, m.Label)
	}

	// Accesses.
	for _, pt := range p.Points {
		ly := float64(laneY(pt.Lane) + laneH/2)
		if pt.Refused {
			cross(b, x(pt.Time), ly, 4, cBad)
			continue
		}
		// On the bar's lower edge, clear of the token.
		fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s" stroke="white" stroke-width="0.8"/>`+"\n", x(pt.Time), ly+barH/2, cOK)
	}

	// The access the picture is about.
	if h := p.Highlight; h != nil {
		hx, hy := x(h.Time), float64(laneY(h.Lane)+laneH/2)
		if h.Accepted {
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="6" fill="%s" stroke="white" stroke-width="1.5"/>`+"\n", hx, hy, cBad)
		} else {
			cross(b, hx, hy, 7, cBad)
		}
		besideBox(b, hx, 10, hy+4, 11, cBad, h.Label)
	}

	if s := p.Series; s != nil {
		s.draw(b, x, seriesTop, end)
	}
}

func (s *Series) draw(b *bytes.Buffer, x func(time.Time) float64, top int, end time.Time) {
	points := append([]SeriesPoint(nil), s.Points...)
	sort.SliceStable(points, func(i, j int) bool { return points[i].Time.Before(points[j].Time) })
	line(b, left, float64(top), float64(width-right), float64(top), "#bdbdbd", 1, "")
	text(b, left-10, float64(top+seriesH/2+4), 11, "bold", cText, "end", s.Label)
	hi := s.Initial
	for _, p := range points {
		hi = max(hi, p.Value)
	}
	hi = max(hi, 1)
	sy := func(v int) float64 {
		return float64(top+seriesH-6) - float64(v)*float64(seriesH-14)/float64(hi)
	}
	x0 := float64(left)
	pts := fmt.Sprintf("%.1f,%.1f", x0, sy(s.Initial))
	cur := s.Initial
	for _, p := range points {
		pts += fmt.Sprintf(" %.1f,%.1f %.1f,%.1f", x(p.Time), sy(cur), x(p.Time), sy(p.Value))
		cur = p.Value
	}
	pts += fmt.Sprintf(" %.1f,%.1f", x(end), sy(cur))
	for _, t := range s.Shade {
		fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", x(t)-3, top+2, 6.0, seriesH-4, cStockBadBg)
	}
	fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="1.5"/>`+"\n", pts, cStockLine)
	text(b, x0+4, sy(s.Initial)-3, 9, "normal", cMuted, "start", fmt.Sprintf("%d", s.Initial))
	text(b, x(end)+4, sy(cur)+3, 9, "normal", cMuted, "start", fmt.Sprintf("%d", cur))
	if n := s.Note; n != nil {
		text(b, x(n.Time)+6, sy(n.Value)-3, 10, "bold", cBad, "start", n.Text)
	}
}

func drawLegend(b *bytes.Buffer, y int, l Legend, note string) {
	lx := float64(left)
	ly := float64(y + 8)
	if l.Lease != "" {
		rect(b, lx, ly, 22, 10, cLease, cLeaseEdge)
		text(b, lx+28, ly+9, 10, "normal", cText, "start", l.Lease)
		lx += 160
	}
	if l.Stale != "" {
		rect(b, lx, ly, 22, 10, cStale, cStaleEdge)
		text(b, lx+28, ly+9, 10, "normal", cText, "start", l.Stale)
		lx += 210
	}
	if l.Window != "" {
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="22" height="10" fill="url(#frozen)"/>`+"\n", lx, ly)
		text(b, lx+28, ly+9, 10, "normal", cText, "start", l.Window)
		lx += 170
	}
	if l.OK != "" {
		fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", lx+6, ly+5, cOK)
		text(b, lx+14, ly+9, 10, "normal", cText, "start", l.OK)
		lx += 165
	}
	if l.Refused != "" {
		cross(b, lx+6, ly+5, 4, cBad)
		text(b, lx+14, ly+9, 10, "normal", cText, "start", l.Refused)
	}
	if note != "" {
		text(b, left, ly+28, 10, "normal", cMuted, "start", note)
	}
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
	w := boxWidth(s, size, weight)
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

// besideBox is a bold label gap units to the right of x, or to its left
// when it would run off the picture.
func besideBox(b *bytes.Buffer, x, gap, y float64, size int, fill, s string) {
	if x+gap+boxWidth(s, size, "bold") <= width-4 {
		textBox(b, x+gap, y, size, "bold", fill, s, "start")
		return
	}
	textBox(b, x-gap, y, size, "bold", fill, s, "end")
}

func boxWidth(s string, size int, weight string) float64 {
	w := float64(len([]rune(s))) * charW * float64(size) / 10
	if weight == "bold" {
		w *= 1.08
	}
	return w
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
