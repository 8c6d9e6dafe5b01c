package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/metrics/prom"
	"github.com/fenceguard/fenceguard/token"
)

// The problem types of this service's own refusals; token refusals use
// httpmw's.
const (
	TypeNoItem      = typeBase + "no-item"      // 404: no such item (or no such route)
	TypeBadBody     = typeBase + "bad-body"     // 400: the JSON body is not {"stock": 0..MaxStock}
	TypeStoreFailed = typeBase + "store-failed" // 500: the store failed; 503 from /healthz
	TypeNotAllowed  = typeBase + "not-allowed"  // 405
	TypeSoldOut     = typeBase + "sold-out"     // 409: POST /items/{sku}/sell with the stock at 0
	typeBase        = "https://pkg.go.dev/github.com/fenceguard/fenceguard/examples/inventory/internal/service#"
	maxSKULen       = 200
	maxBodyBytes    = 1 << 10
	healthTimeout   = 2 * time.Second
)

// Options configure [New].
type Options struct {
	// Store keeps the items. Required.
	Store Store

	// Unfenced switches fencing off: no middleware, and the store gets no
	// token — a plain read, then a plain write. For the demo's control run;
	// never for real.
	Unfenced bool

	// Registry receives the fenceguard metrics and is what /metrics serves.
	// Default: a new registry.
	Registry *prometheus.Registry

	// Logger receives token refusals (the first of each kind at Info, then
	// at most one a minute; the rest at Debug) and store failures (Error).
	// Default slog.Default().
	Logger *slog.Logger

	// Sequencer is the lock service's answer to "which token does the
	// current grant of this lock carry?" (backend.OpenSequencer). With it,
	// fenced routes refuse a token above the current grant of the item's
	// lock (403), so a client that makes up a token can at worst act as
	// the current holder, and the admin reset of a mark defaults to it.
	// Without it, only the clock bound refuses made-up tokens — which
	// bounds clock-floored tokens (Redis, Redlock) to five minutes of
	// lockout, and etcd's and ZooKeeper's not at all.
	Sequencer token.Sequencer

	// MarkCacheTTL is how long a mark the store reported refuses lower
	// tokens for the item in this process, without a statement (a holder
	// that lost its lock tends to keep trying). Default
	// DefaultMarkCacheTTL; negative: no cache, every token goes to the
	// store. It only refuses what the store would: marks only go up, except
	// by a reset — after a reset through another instance, this one may go
	// on refusing tokens between the new mark and the old for up to the
	// TTL. Whatever it lets through, the store checks and claims.
	MarkCacheTTL time.Duration
}

// New returns the service's routes.
func New(o Options) (http.Handler, error) {
	if o.Store == nil {
		return nil, errors.New("service: Options.Store is required")
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	m, err := prom.New(o.Registry, prom.Options{Class: Class})
	if err != nil {
		return nil, err
	}
	s := &server{store: o.Store, fenced: !o.Unfenced, metrics: m, log: o.Logger, seq: o.Sequencer,
		refusals: httpmw.NewRefusalLog(o.Logger, 1, time.Minute)}
	if s.fenced {
		s.marks = newMarkCache(o.MarkCacheTTL, nil)
	}
	// The cheap local bound first, so made-up tokens far above the clock
	// cost no query to the lock service; then the lock service's word.
	var check token.Check = token.ClockBound{}
	if o.Sequencer != nil {
		check = token.All(check, token.SequencerCheck(o.Sequencer, token.SequencerOptions{}))
	}

	r := chi.NewRouter()
	r.NotFound(func(w http.ResponseWriter, _ *http.Request) {
		writeProblem(w, http.StatusNotFound, TypeNoItem, "not found", "")
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Allow", strings.Join(allowed(r, req), ", "))
		writeProblem(w, http.StatusMethodNotAllowed, TypeNotAllowed, "method not allowed", "")
	})
	// HEAD answers like GET, without the body (net/http drops it).
	get := func(r chi.Router, pattern string, h http.HandlerFunc) {
		r.Get(pattern, h)
		r.Head(pattern, h)
	}
	get(r, "/healthz", s.health)
	get(r, "/metrics", promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{}).ServeHTTP)

	items := r.With() // the lock holders' routes
	if s.fenced {
		// The middleware parses the token and runs the Check (the clock
		// bound, then the lock service's word): what it refuses never
		// reaches a store. It claims nothing: the store claims, in the
		// same statement (SQL; a MySQL read claims just before it) or
		// critical section (memory) as the access, so the mark moves
		// only on an access that happens — not
		// on a bad body, an unknown item or a name the handler refuses —
		// and a fenced request costs one commit, not two. See the package
		// doc, "Fencing".
		mw, err := httpmw.New(httpmw.Options{
			Resource:    itemResource,
			Fence:       httpmw.ClaimInStore,
			Check:       m.Check(check), // its refusals counted as "forged"
			Observe:     m.HTTP,         // every request's outcome, header-parse refusals included
			Log:         s.refusals,
			ErrorWriter: s.refused,
		})
		if err != nil {
			return nil, err
		}
		items = r.With(mw.Handler)
	}
	get(items, "/items/{sku}", s.getItem)
	items.Put("/items/{sku}/stock", s.putStock)
	items.Post("/items/{sku}/sell", s.sell)

	r.Route("/admin", func(r chi.Router) { // unfenced: operators, not lock holders
		get(r, "/items/{sku}", s.adminGet)
		r.Put("/items/{sku}", s.adminPut)
		r.Post("/items/{sku}/reset-mark", s.adminResetMark)
	})
	return options(r), nil
}

// itemResource is the middleware's resource key, "sku:<sku>" (ChiParam's),
// for names the handlers accept as an item; any other name answers 404 in
// the middleware already, as it would in the handler.
func itemResource(r *http.Request) (string, error) {
	sku, err := httpmw.ChiValue(r, "sku")
	if err != nil {
		return "", err
	}
	if !validSKU(sku) {
		return "", fmt.Errorf("%q is not an item name", sku)
	}
	return resource(sku), nil
}

// methods are the methods the router is asked about for Allow.
var methods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// allowed lists the methods r routes for req's path, OPTIONS included.
func allowed(r *chi.Mux, req *http.Request) []string {
	path := req.URL.RawPath
	if path == "" {
		path = req.URL.Path
	}
	var out []string
	for _, m := range methods {
		if r.Match(chi.NewRouteContext(), m, path) {
			out = append(out, m)
		}
	}
	if out != nil {
		out = append(out, http.MethodOptions)
	}
	return out
}

// options answers OPTIONS for every route: 204 with Allow, or 404 for a
// path no route serves. It touches no item, so it claims nothing.
func options(r *chi.Mux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodOptions {
			r.ServeHTTP(w, req)
			return
		}
		allow := allowed(r, req)
		if allow == nil {
			writeProblem(w, http.StatusNotFound, TypeNoItem, "not found", "")
			return
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		w.WriteHeader(http.StatusNoContent)
	})
}

// Class maps a lock or resource key ("sku:lamp", "items:lamp") to its
// metrics class ("sku", "items"): the part before the first ':'.
func Class(key string) string {
	c, _, _ := strings.Cut(key, ":")
	return c
}

type server struct {
	store   Store
	fenced  bool
	metrics *prom.Metrics
	log     *slog.Logger
	seq     token.Sequencer // nil: no sequencer check, and resets need a "to"
	marks   *markCache      // nil: unfenced, or no cache

	refusals *httpmw.RefusalLog // the middleware's refusals and the store's, rate-limited
}

func (s *server) getItem(w http.ResponseWriter, r *http.Request) {
	sku, ok := skuParam(w, r)
	if !ok {
		return
	}
	t, epoch, err := s.token(r, sku)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	it, err := s.store.Get(r.Context(), sku, t)
	s.recordClaim(sku, t, epoch, err)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, it)
}

func (s *server) putStock(w http.ResponseWriter, r *http.Request) {
	sku, ok := skuParam(w, r)
	if !ok {
		return
	}
	stock, ok := stockBody(w, r)
	if !ok {
		return
	}
	t, epoch, err := s.token(r, sku)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	it, err := s.store.SetStock(r.Context(), sku, stock, t)
	s.recordClaim(sku, t, epoch, err)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, it)
}

func (s *server) sell(w http.ResponseWriter, r *http.Request) {
	sku, ok := skuParam(w, r)
	if !ok {
		return
	}
	t, epoch, err := s.token(r, sku)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	err = s.store.Sell(r.Context(), sku, t)
	claimErr := err
	if errors.Is(err, ErrSoldOut) {
		claimErr = nil // the store accepted the token: sold out is an answer
	}
	s.recordClaim(sku, t, epoch, claimErr)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) adminGet(w http.ResponseWriter, r *http.Request) {
	sku, ok := skuParam(w, r)
	if !ok {
		return
	}
	it, err := s.store.Get(r.Context(), sku, 0)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	mark, err := s.store.HighWater(r.Context(), sku)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, AdminItem{Item: it, HighWater: mark})
}

func (s *server) adminPut(w http.ResponseWriter, r *http.Request) {
	sku, ok := skuParam(w, r)
	if !ok {
		return
	}
	stock, ok := stockBody(w, r)
	if !ok {
		return
	}
	it, err := s.store.Put(r.Context(), sku, stock)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, it)
}

// adminResetMark sets an item's fencing marks back by hand — the way back
// for an item a made-up token poisoned (every honest holder refused as
// stale). The body may name the mark, {"to": "123"}; by default it is the
// token of the current grant of the item's lock, so its holder and every
// later one get through, every earlier one is still refused. Each store
// logs the reset at Warn. One item per request, by name.
func (s *server) adminResetMark(w http.ResponseWriter, r *http.Request) {
	sku, ok := skuParam(w, r)
	if !ok {
		return
	}
	var body struct {
		To *token.Token `json:"to"`
	}
	if r.ContentLength != 0 {
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil || dec.More() {
			writeProblem(w, http.StatusBadRequest, TypeBadBody, "bad request body", `want {"to": "<token>"} or nothing`)
			return
		}
	}
	var to token.Token
	switch {
	case body.To != nil:
		to = *body.To
	case s.seq != nil:
		cur, err := s.seq.Current(r.Context(), resource(sku))
		if err != nil {
			s.log.Warn("reset: the lock service cannot say the current token", "sku", sku, "err", err)
			writeProblem(w, http.StatusServiceUnavailable, TypeStoreFailed, "lock service unavailable", "")
			return
		}
		to = cur
	default:
		writeProblem(w, http.StatusBadRequest, TypeBadBody, "bad request body", `no lock service to ask: name the mark, {"to": "<token>"}`)
		return
	}
	if to.IsZero() {
		writeProblem(w, http.StatusBadRequest, TypeBadBody, "bad request body", "the mark cannot be reset to 0")
		return
	}
	prev, err := s.store.ResetMark(r.Context(), sku, to)
	s.marks.forget(sku)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, MarkReset{SKU: sku, From: prev, To: to})
}

// MarkReset is the answer to POST /admin/items/{sku}/reset-mark.
type MarkReset struct {
	SKU  string      `json:"sku"`
	From token.Token `json:"from"` // the highest mark replaced
	To   token.Token `json:"to"`
}

func (s *server) health(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		s.log.Warn("health check: store does not answer", "err", err)
		writeProblem(w, http.StatusServiceUnavailable, TypeStoreFailed, "store unavailable", "")
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "ok\n")
}

// token is the token the middleware accepted for this item, or zero: no
// fencing, or a read without a token; and the mark cache's epoch, for
// recordClaim. A token below a mark the store reported for the item
// moments ago is refused here as stale (markCache). A token the middleware
// claimed for another resource is an error, never a reason to access the
// item unfenced: the handler and the middleware would disagree on what
// the item is.
func (s *server) token(r *http.Request, sku string) (token.Token, uint64, error) {
	if !s.fenced {
		return 0, 0, nil
	}
	epoch := s.marks.epoch()
	key, t, ok := token.FromContext(r.Context())
	switch {
	case !ok:
		return 0, epoch, nil
	case key != resource(sku):
		return 0, 0, fmt.Errorf("%w: the middleware claimed %q, the handler serves %q", httpmw.ErrKeyMismatch, key, resource(sku))
	}
	if se := s.marks.stale(sku, t); se != nil {
		s.metrics.Claim("items:"+sku, t, se) // refused as the store would have
		return 0, 0, se
	}
	return t, epoch, nil
}

// recordClaim counts the store's own check of a fenced access, under the
// class "items" (the middleware's claims count under "sku"), and keeps the
// mark the store reported unless a reset went through this process since
// epoch.
func (s *server) recordClaim(sku string, t token.Token, epoch uint64, err error) {
	if t.IsZero() || errors.Is(err, ErrNotFound) || errors.Is(err, context.Canceled) {
		return
	}
	var stale *token.StaleError
	switch {
	case err == nil:
		s.marks.learn(sku, t, epoch)
	case errors.As(err, &stale):
		s.marks.learn(sku, stale.Current, epoch)
	}
	s.metrics.Claim("items:"+sku, t, err)
}

// refused is the middleware's ErrorWriter: the standard problem (the
// middleware has logged it through Options.Log, rate-limited, and counted
// it through Options.Observe).
func (s *server) refused(w http.ResponseWriter, r *http.Request, p *httpmw.Problem) {
	if p.Type == httpmw.TypeNoResource { // a name that is no item: the handlers' own 404
		writeProblem(w, http.StatusNotFound, TypeNoItem, "no such item", "")
		return
	}
	httpmw.WriteProblem(w, p)
}

// fail answers a handler's error: the service's own answers first, then
// httpmw.WriteError for every error of the store's fencing.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var stale *token.StaleError
	switch {
	case errors.Is(err, ErrNotFound):
		writeProblem(w, http.StatusNotFound, TypeNoItem, "no such item", "")
		return
	case errors.Is(err, ErrSoldOut):
		writeProblem(w, http.StatusConflict, TypeSoldOut, "sold out", "")
		return
	case errors.As(err, &stale):
		s.refusals.Log(r, httpmw.Outcome{Result: httpmw.ResultStale, Status: http.StatusConflict,
			Resource: stale.Resource, Token: stale.Presented, Problem: &httpmw.Problem{Err: err}})
	}
	if p := httpmw.WriteError(w, r, err); p.Status >= 500 && r.Context().Err() == nil {
		s.log.Error("store failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
}

// skuParam returns the route's {sku}, unescaped by httpmw.ChiValue, as the
// middleware's ChiParam does, so the handler names the item the middleware
// claimed. A name that is no item answers 404.
func skuParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	sku, err := httpmw.ChiValue(r, "sku")
	if err != nil || !validSKU(sku) {
		writeProblem(w, http.StatusNotFound, TypeNoItem, "no such item", "")
		return "", false
	}
	return sku, true
}

func validSKU(sku string) bool {
	if sku == "" || len(sku) > maxSKULen || !utf8.ValidString(sku) {
		return false
	}
	return strings.IndexFunc(sku, unicode.IsControl) < 0
}

// stockBody reads {"stock": n}, 0 ≤ n ≤ MaxStock, and nothing else. The
// problem's detail never echoes the body.
func stockBody(w http.ResponseWriter, r *http.Request) (int, bool) {
	var body struct {
		Stock *int64 `json:"stock"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	detail := ""
	var tooLarge *http.MaxBytesError
	switch err := dec.Decode(&body); {
	case errors.As(err, &tooLarge):
		detail = "body too large"
	case err != nil || dec.More() || body.Stock == nil:
		detail = `want {"stock": n}`
	case *body.Stock < 0 || *body.Stock > MaxStock:
		detail = fmt.Sprintf(`"stock" must be between 0 and %d`, MaxStock)
	}
	if detail != "" {
		writeProblem(w, http.StatusBadRequest, TypeBadBody, "bad request body", detail)
		return 0, false
	}
	return int(*body.Stock), true
}

func writeProblem(w http.ResponseWriter, status int, typ, title, detail string) {
	httpmw.WriteProblem(w, &httpmw.Problem{Type: typ, Title: title, Status: status, Detail: detail})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeProblem(w, http.StatusInternalServerError, TypeStoreFailed, "encoding failed", "")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
