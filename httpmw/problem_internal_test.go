package httpmw

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/fenceguard/fenceguard/token"
)

// FuzzProblemJSON: the hand-written encoder writes exactly what
// encoding/json writes for every Problem, escapes and omissions included.
func FuzzProblemJSON(f *testing.F) {
	for _, s := range []string{"", "plain", `q"uote\back`, "<script>&", "\x00\x01\b\f\n\r\t\x1f\x7f",
		"\u2028\u2029", "\u202e", "\xff\xfe", "héllo", "a\xc3", "\xed\xa0\x80", "日本"} {
		f.Add(s, s, s, s, 409, uint64(0), uint64(5), uint64(1<<63))
	}
	f.Fuzz(func(t *testing.T, typ, title, detail, resource string, status int, presented, current, bound uint64) {
		p := &Problem{Type: typ, Title: title, Status: status, Detail: detail, Resource: resource,
			Presented: token.Token(presented), Current: token.Token(current), Bound: token.Token(bound)}
		want, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.appendJSON(nil); !bytes.Equal(got, want) {
			t.Fatalf("appendJSON:\n got %s\nwant %s", got, want)
		}
	})
}

func BenchmarkWriteProblem(b *testing.B) {
	p := problemStale(&token.StaleError{Resource: "sku:lamp", Presented: 41, Current: 42}, nil)
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		WriteProblem(w, p)
	}
}

type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}
