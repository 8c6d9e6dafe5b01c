package timeline

import (
	"bytes"
	"encoding/xml"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// element is an SVG element as the tests look at it.
type element struct {
	name  string
	attrs map[string]string
	text  string
}

func parse(t *testing.T, svg []byte) []element {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(svg))
	var els []element
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return els
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, svg)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			e := element{name: tok.Name.Local, attrs: map[string]string{}}
			for _, a := range tok.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			els = append(els, e)
		case xml.CharData:
			if len(els) > 0 && strings.TrimSpace(string(tok)) != "" {
				els[len(els)-1].text += string(tok)
			}
		}
	}
}

func draw(t *testing.T, c Chart) []element {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, c); err != nil {
		t.Fatal(err)
	}
	return parse(t, b.Bytes())
}

func texts(els []element) map[string]element {
	m := map[string]element{}
	for _, e := range els {
		if e.name == "text" {
			m[e.text] = e
		}
	}
	return m
}

func num(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// A fault run: a server fault over every lane, a takeover marker near the
// right edge, a refused stale write, no value series.
func TestChart(t *testing.T) {
	p := Panel{
		Title: "fencing ON", Verdict: "no violation", Good: true, Subtitle: "pg-column",
		Start: t0, Lanes: []string{"c1", "c2", "c3"},
		Leases: []Lease{
			{Lane: 0, Token: "7", Start: at(10), End: at(1500), StaleFrom: at(1400), HideToken: true},
			{Lane: 1, Token: "9", Start: at(1400), End: at(1600)},
		},
		Windows:   []Window{{Lane: -1, Start: at(100), End: at(1300), Label: "Redis KILLED"}},
		Markers:   []Marker{{Time: at(1400), Label: "c1's lock (token 7) lost: c2 granted token 9, a long label"}},
		Points:    []Point{{Lane: 1, Time: at(1450)}, {Lane: 2, Time: at(1500), Refused: true}},
		Highlight: &Highlight{Lane: 0, Time: at(1550), Label: "c1's stale write REFUSED: token 7 < 9"},
	}
	els := draw(t, Chart{Title: "a run", Panels: []Panel{p}, Legend: Legend{Lease: "lease", Refused: "refused"}, Note: "small print"})
	txt := texts(els)
	for _, want := range []string{"a run", "fencing ON", "no violation", "pg-column", "c1", "c2", "c3", "9",
		"Redis KILLED", "c1's stale write REFUSED: token 7 < 9", "lease", "refused", "small print", "0.0s", "1.6s"} {
		if _, ok := txt[want]; !ok {
			t.Errorf("no text %q", want)
		}
	}
	if _, ok := txt["7"]; ok {
		t.Errorf("a hidden token is drawn")
	}
	if _, ok := txt["stock"]; ok {
		t.Errorf("a series is drawn without one")
	}
	// Labels that would run off the right edge are drawn left of their
	// point instead.
	for _, label := range []string{"c1's lock (token 7) lost: c2 granted token 9, a long label", "c1's stale write REFUSED: token 7 < 9"} {
		e := txt[label]
		if e.attrs["text-anchor"] != "end" || num(t, e.attrs["x"]) > width {
			t.Errorf("%q: anchor %s at x=%s", label, e.attrs["text-anchor"], e.attrs["x"])
		}
	}
	// The fault window spans the three lanes.
	for _, e := range els {
		if e.name == "rect" && e.attrs["fill"] == "url(#frozen)" && e.attrs["height"] != "10" {
			if h := num(t, e.attrs["height"]); h != 3*laneH-6 {
				t.Errorf("window height %v, want %v", h, 3*laneH-6)
			}
		}
	}
}

// The value series: from the initial value through every point to the end,
// with the shaded time and the note.
func TestSeries(t *testing.T) {
	p := Panel{
		Title: "fencing OFF", Verdict: "oversold", Start: t0, Lanes: []string{"w1"},
		Series: &Series{Label: "stock", Initial: 4,
			Points: []SeriesPoint{{Time: at(3000), Value: 2}, {Time: at(1000), Value: 3}},
			Shade:  []time.Time{at(3000)},
			Note:   &SeriesPoint{Time: at(3000), Value: 2, Text: "back up"}},
		End: at(4000),
	}
	els := draw(t, Chart{Panels: []Panel{p, p}})
	var lines, shades int
	for _, e := range els {
		switch {
		case e.name == "polyline":
			lines++
			if n := len(strings.Fields(e.attrs["points"])); n != 1+2*2+1 {
				t.Errorf("polyline with %d points: %s", n, e.attrs["points"])
			}
		case e.name == "rect" && e.attrs["fill"] == cStockBadBg:
			shades++
		}
	}
	if lines != 2 || shades != 2 {
		t.Errorf("%d lines and %d shades for two panels", lines, shades)
	}
	txt := texts(els)
	for _, want := range []string{"stock", "4", "2", "back up", "4s"} {
		if _, ok := txt[want]; !ok {
			t.Errorf("no text %q", want)
		}
	}
}

func TestTickStep(t *testing.T) {
	for _, c := range []struct {
		span, want time.Duration
	}{
		{0, 100 * time.Millisecond},
		{1900 * time.Millisecond, 100 * time.Millisecond},
		{2100 * time.Millisecond, time.Second},
		{7 * time.Second, time.Second},
		{30 * time.Second, 2 * time.Second},
		{3 * time.Minute, 10 * time.Second},
		{2 * time.Hour, 6 * time.Minute},
	} {
		if got := tickStep(c.span); got != c.want {
			t.Errorf("tickStep(%v) = %v, want %v", c.span, got, c.want)
		}
	}
}
