package prom

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/token"
)

// Options configure [New]. Zero fields select defaults.
type Options struct {
	// Namespace prefixes every metric name. Default "fenceguard".
	Namespace string

	// Class maps a lock or resource key to a bounded label value, e.g. the
	// part before the first ':'. Default: "default" for every key. A
	// class that is not UTF-8 is counted as "other".
	Class func(key string) string

	// MaxClasses caps the distinct classes exported; later ones are
	// counted as "other". Default 50.
	MaxClasses int

	// TrackHighWater selects resources whose accepted high-water is
	// exported as a gauge labelled with the resource key. Keep the set
	// small; a key that is not UTF-8 gets none. Default: none.
	TrackHighWater func(resource string) bool
}

// Metrics holds the collectors. Create it once per registry.
type Metrics struct {
	o Options

	known   sync.Map        // class → struct{}: the classes kept, read without a lock on every event and claim
	mu      sync.Mutex      // serializes adding a class
	classes map[string]bool // guarded by mu

	acquireWait  *prometheus.HistogramVec
	acquisitions *prometheus.CounterVec
	acquireFails *prometheus.CounterVec
	renewals     *prometheus.CounterVec
	renewSeconds *prometheus.HistogramVec
	renewFails   *prometheus.CounterVec
	lost         *prometheus.CounterVec
	releases     *prometheus.CounterVec
	releaseFails *prometheus.CounterVec
	holdSeconds  *prometheus.HistogramVec
	held         *prometheus.GaugeVec
	claims       *prometheus.CounterVec
	httpReqs     *prometheus.CounterVec
	grpcCalls    *prometheus.CounterVec
	highWater    *prometheus.GaugeVec
}

// New creates the collectors and registers them with reg.
func New(reg prometheus.Registerer, o Options) (*Metrics, error) {
	if o.Namespace == "" {
		o.Namespace = "fenceguard"
	}
	if o.Class == nil {
		o.Class = func(string) string { return "default" }
	}
	if o.MaxClasses <= 0 {
		o.MaxClasses = 50
	}
	ns := o.Namespace
	cls := []string{"class"}
	// Lock waits span a millisecond to minutes; renewals and holds alike.
	buckets := prometheus.ExponentialBuckets(0.0005, 4, 10) // 0.5ms .. ~131s
	m := &Metrics{
		o:       o,
		classes: map[string]bool{},
		acquireWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "acquire_wait_seconds",
			Help: "Time from an Acquire call to the grant, waiting included.", Buckets: buckets}, cls),
		acquisitions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "acquisitions_total",
			Help: "Leases granted."}, cls),
		acquireFails: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "acquire_failures_total",
			Help: "Acquire calls that gave up (context ended, bad argument, lock service unreachable)."}, cls),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "renewals_total",
			Help: "Successful lease renewals."}, cls),
		renewSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "renew_seconds",
			Help: "Round trip of one successful renewal.", Buckets: buckets}, cls),
		renewFails: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "renewal_failures_total",
			Help: "Renewals that failed without being refused (lock service unreachable)."}, cls),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "leases_lost_total",
			Help: "Leases lost while held: refused (the grant was gone), deadline (renewals failed too long), other."},
			[]string{"class", "cause"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "releases_total",
			Help: "Leases released while held."}, cls),
		releaseFails: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "release_failures_total",
			Help: "Release calls that failed to reach the lock service (the lock expires at its TTL)."}, cls),
		holdSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "lease_hold_seconds",
			Help: "Time from grant to release or loss.", Buckets: buckets}, cls),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "leases_held",
			Help: "Leases currently held by this process."}, cls),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "claims_total",
			Help: "Resource-side token checks: accepted, stale (refused, lower than the high-water), forged (refused, above any token the lock can have granted), invalid (bad input), error (check not made)."},
			[]string{"class", "result"}),
		httpReqs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "http_requests_total",
			Help: "Decisions of the HTTP middleware (Metrics.HTTP as httpmw.Options.Observe): accepted, unfenced (no token, none required), and every refusal — missing (428), invalid (400: malformed, too long, two headers, out of range), no_resource (404), forged (403), stale (409), unavailable (503)."},
			[]string{"class", "result"}),
		grpcCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "grpc_calls_total",
			Help: "Decisions of grpcmw's server interceptors (Metrics.GRPC from grpcmw.Options.Observe): accepted, unfenced (no token, none required), and every refusal — missing (FAILED_PRECONDITION), invalid (INVALID_ARGUMENT: malformed, two values, binary, out of range), no_resource (INVALID_ARGUMENT), forged (PERMISSION_DENIED), stale (ABORTED), unavailable (UNAVAILABLE)."},
			[]string{"class", "result"}),
		highWater: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "high_water",
			Help: "Highest token accepted, for tracked resources only."}, []string{"resource"}),
	}
	for _, c := range []prometheus.Collector{m.acquireWait, m.acquisitions, m.acquireFails, m.renewals, m.renewSeconds,
		m.renewFails, m.lost, m.releases, m.releaseFails, m.holdSeconds, m.held, m.claims, m.httpReqs, m.grpcCalls, m.highWater} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("prom: register: %w", err)
		}
	}
	return m, nil
}

// class bounds the label: the first MaxClasses classes seen are kept.
// A class already kept costs a lock-free lookup; only a new one takes the
// lock.
func (m *Metrics) class(key string) string {
	c := m.o.Class(key)
	if !utf8.ValidString(c) {
		return "other" // Prometheus panics on such a label
	}
	if _, ok := m.known.Load(c); ok {
		return c
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.classes[c] {
		return c
	}
	if len(m.classes) >= m.o.MaxClasses {
		return "other"
	}
	m.classes[c] = true
	m.known.Store(c, struct{}{})
	return c
}

// Observe records a guard event. Pass it as guard.Options.Observer.
func (m *Metrics) Observe(e guard.Event) {
	c := m.class(e.Key)
	switch e.Kind {
	case guard.Acquired:
		m.acquisitions.WithLabelValues(c).Inc()
		m.acquireWait.WithLabelValues(c).Observe(e.Duration.Seconds())
		m.held.WithLabelValues(c).Inc()
	case guard.AcquireFailed:
		m.acquireFails.WithLabelValues(c).Inc()
	case guard.Renewed:
		m.renewals.WithLabelValues(c).Inc()
		m.renewSeconds.WithLabelValues(c).Observe(e.Duration.Seconds())
	case guard.RenewFailed:
		m.renewFails.WithLabelValues(c).Inc()
	case guard.Lost:
		m.lost.WithLabelValues(c, cause(e.Err)).Inc()
		m.holdSeconds.WithLabelValues(c).Observe(e.Duration.Seconds())
		m.held.WithLabelValues(c).Dec()
	case guard.Released:
		m.releases.WithLabelValues(c).Inc()
		if e.Err != nil {
			m.releaseFails.WithLabelValues(c).Inc()
		}
		m.holdSeconds.WithLabelValues(c).Observe(e.Duration.Seconds())
		m.held.WithLabelValues(c).Dec()
	}
}

func cause(err error) string {
	switch {
	case errors.Is(err, guard.ErrDeadline):
		return "deadline"
	case errors.Is(err, locks.ErrNotHeld):
		return "refused"
	}
	return "other"
}

// Claim records one resource-side check of t against resource, by its
// outcome err (nil: accepted). Enforcers that are not a token.Fence (the
// PostgreSQL column mode, say) call it after each fenced statement.
func (m *Metrics) Claim(resource string, t token.Token, err error) {
	c := m.class(resource)
	result := claimResult(err)
	m.claims.WithLabelValues(c, result).Inc()
	if err == nil && m.o.TrackHighWater != nil && utf8.ValidString(resource) && m.o.TrackHighWater(resource) {
		m.highWater.WithLabelValues(resource).Set(float64(t))
	}
}

// claimResult is the result label of a claim's outcome. A forged token is
// a result of its own: a client presenting tokens no lock granted is an
// attack or a misconfigured key mapping, not a lost lock. A token beyond
// what the store can hold ([token.ErrRange]) is bad input.
func claimResult(err error) string {
	switch {
	case err == nil:
		return "accepted"
	case errors.Is(err, token.ErrStale):
		return "stale"
	case errors.Is(err, token.ErrForged):
		return "forged"
	case errors.Is(err, token.ErrMissing), errors.Is(err, token.ErrNoResource),
		errors.Is(err, token.ErrInvalid), errors.Is(err, token.ErrRange):
		return "invalid"
	}
	return "error"
}

// Fence returns f with every claim recorded.
func (m *Metrics) Fence(f token.Fence) token.Fence { return &fence{f: f, m: m} }

type fence struct {
	f token.Fence
	m *Metrics
}

func (f *fence) Claim(ctx context.Context, resource string, t token.Token) error {
	err := f.f.Claim(ctx, resource, t)
	f.m.Claim(resource, t, err)
	return err
}

// Check returns c (nil: token.DefaultCheck) with every refusal recorded in
// claims_total — "forged", or "error" when it could not decide. A token
// it lets through is not counted: the claim that follows is. Use it for a
// check that runs before a Fence rather than inside one (httpmw's
// Options.Check); the refusals of a check inside a Fence that [Metrics.Fence]
// wraps are recorded there already.
func (m *Metrics) Check(c token.Check) token.Check {
	if c == nil {
		c = token.DefaultCheck()
	}
	return &check{c: c, m: m}
}

type check struct {
	c token.Check
	m *Metrics
}

func (c *check) Check(ctx context.Context, resource string, t token.Token) error {
	err := c.c.Check(ctx, resource, t)
	if err != nil {
		c.m.Claim(resource, t, err)
	}
	return err
}

// HTTP records one decision of httpmw's middleware in
// http_requests_total{class,result}. Pass it as httpmw.Options.Observe: it
// counts every request the middleware handles, the refusals that no
// Fence or Check sees included (a missing, malformed, too long or doubled
// header: 428 and 400; a request naming no resource: 404), which
// [Metrics.Fence] and [Metrics.Check] cannot count. Refusals made before
// the resource key is derived, and unfenced requests, have the class
// "none". It does not touch claims_total: with a wrapped Fence as well,
// each claim is counted once there and each request once here.
func (m *Metrics) HTTP(_ *http.Request, o httpmw.Outcome) {
	m.decision(m.httpReqs, o.Resource, string(o.Result))
}

// GRPC records one decision of grpcmw's server interceptors in
// grpc_calls_total{class,result}, from the resource key and the result of
// a grpcmw.Outcome. Call it from grpcmw.Options.Observe:
//
//	Observe: func(_ context.Context, _ string, o grpcmw.Outcome) {
//		m.GRPC(o.Resource, string(o.Result))
//	},
//
// It takes plain strings so that neither module imports the other: grpc
// stays out of this module's graph, Prometheus out of grpcmw's. It counts
// what [Metrics.HTTP] counts over HTTP, with the same labels: every call
// to a fenced method, each stream's claim and each refusal of a stream's
// later messages (grpcmw's Options.CheckEachMessage) included; the class
// of the key, "none" when it is "" (a refusal made before the key is
// derived, an unfenced call); and the result, one of grpcmw's (which are
// httpmw's), any other string counting as "other".
func (m *Metrics) GRPC(resource, result string) {
	m.decision(m.grpcCalls, resource, result)
}

// decision counts one decision of a fencing middleware, whatever its
// transport, in c: the key by its bounded class ("none" before it is
// known), the result as itself when it is one of the middlewares'
// results, as "other" otherwise, so that no caller can grow the label.
func (m *Metrics) decision(c *prometheus.CounterVec, resource, result string) {
	class := "none"
	if resource != "" {
		class = m.class(resource)
	}
	switch result {
	case "accepted", "unfenced", "missing", "invalid", "no_resource", "forged", "stale", "unavailable":
	default:
		result = "other"
	}
	c.WithLabelValues(class, result).Inc()
}
