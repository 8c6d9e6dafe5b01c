package httpmw_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/token"
)

// discardWriter is a ResponseWriter that allocates nothing, so the
// benchmarks measure routing and fencing, not recording.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) WriteHeader(int)             {}

type ctxFloorKey struct{}

var ctxFloorValue = new(int)

func noContent(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }

// The same chi route, bare and behind the middleware with a MemoryFence.
// Every request carries the same valid token, so every claim succeeds (an
// equal token is accepted): the success path, which is the one that
// matters. The difference between bare and fenced is the overhead.
//
//	go test -run '^$' -bench 'ChiRoute' -benchmem -count 10 ./httpmw/
func BenchmarkChiRoute(b *testing.B) {
	fenced := func(o httpmw.Options) http.Handler {
		var fence token.MemoryFence
		o.Resource, o.Fence = httpmw.ChiParam("sku"), &fence
		mw, err := httpmw.New(o)
		if err != nil {
			b.Fatal(err)
		}
		r := chi.NewRouter()
		r.With(mw.Handler).Put("/sku/{sku}", noContent)
		return r
	}
	bare := chi.NewRouter()
	bare.Put("/sku/{sku}", noContent)
	// The floor of any middleware that hands the handler a value in the
	// request context: one context node and one copy of the request.
	withContext := chi.NewRouter()
	withContext.With(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxFloorKey{}, ctxFloorValue)))
		})
	}).Put("/sku/{sku}", noContent)

	for _, bc := range []struct {
		name string
		h    http.Handler
	}{
		{"bare", bare},
		{"bare+WithContext", withContext},
		{"fenced", fenced(httpmw.Options{})},
		{"fenced+serialized", fenced(httpmw.Options{SerializePerKey: true})},
	} {
		b.Run(bc.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodPut, "/sku/42", nil)
			req.Header.Set(token.Header, "1717171717171717")
			w := &discardWriter{h: make(http.Header)}
			b.ReportAllocs()
			for b.Loop() {
				bc.h.ServeHTTP(w, req)
			}
		})
	}
}

// The same on both cores, each goroutine on its own keys.
func BenchmarkChiRouteParallel(b *testing.B) {
	var fence token.MemoryFence
	mw, err := httpmw.New(httpmw.Options{Resource: httpmw.ChiParam("sku"), Fence: &fence})
	if err != nil {
		b.Fatal(err)
	}
	fenced := chi.NewRouter()
	fenced.With(mw.Handler).Put("/sku/{sku}", noContent)
	bare := chi.NewRouter()
	bare.Put("/sku/{sku}", noContent)
	for name, h := range map[string]http.Handler{"bare": bare, "fenced": fenced} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				reqs := make([]*http.Request, 64)
				for i := range reqs {
					reqs[i] = httptest.NewRequest(http.MethodPut, "/sku/"+strconv.Itoa(i), nil)
					reqs[i].Header.Set(token.Header, "1717171717171717")
				}
				w := &discardWriter{h: make(http.Header)}
				for i := 0; pb.Next(); i++ {
					h.ServeHTTP(w, reqs[i%len(reqs)])
				}
			})
		})
	}
}
