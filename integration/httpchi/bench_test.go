package httpchi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/locks/memlock"
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

// benchToken is the token every benchmark request carries: below the
// clock, as a clock-floored token granted in the past is.
const benchToken token.Token = 1717171717171717

// heldLocker returns a memlock Locker whose current holder of sku:42 has
// a token at or above benchToken.
func heldLocker(b *testing.B) *memlock.Locker {
	l := memlock.New()
	lease, err := l.Acquire(context.Background(), "sku:42", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = lease.Release(context.Background()) })
	if lease.Token() < benchToken {
		b.Fatalf("token %d below the benchmark's %d", lease.Token(), benchToken)
	}
	return l
}

// The same chi route, bare and behind the middleware with a MemoryFence.
// Every request carries the same valid token, so every claim succeeds (an
// equal token is accepted): the success path, which is the one that
// matters. The difference between bare and fenced is the overhead.
//
//	go test -run '^$' -bench 'ChiRoute' -benchmem -count 10 ./integration/httpchi/
func BenchmarkChiRoute(b *testing.B) {
	fenced := func(o httpmw.Options) http.Handler {
		fence := &token.MemoryFence{Check: o.Check} // the same check in the fence, as a user would
		o.Resource, o.Fence = httpmw.ChiParam("sku"), fence
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
		// The default check (the clock bound) off, in the middleware and
		// the fence: what the clock reads cost.
		{"fenced,NoCheck", fenced(httpmw.Options{Check: token.NoCheck()})},
		// The clock bound and a sequencer check on memlock, whose cached
		// answer covers every request: what a cache hit costs.
		{"fenced+sequencer", fenced(httpmw.Options{Check: token.All(token.ClockBound{}, token.SequencerCheck(heldLocker(b), token.SequencerOptions{}))})},
	} {
		b.Run(bc.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodPut, "/sku/42", nil)
			req.Header.Set(token.Header, benchToken.String())
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
