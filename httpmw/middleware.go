package httpmw

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/fenceguard/fenceguard/token"
)

// errDuplicate is the cause of the 400 for a request with two headers.
var errDuplicate = fmt.Errorf("%w: more than one %s header", token.ErrInvalid, token.Header)

// headerKey is token.Header in the canonical form net/http stores headers
// under, so the hot path can index the map without canonicalising.
var headerKey = http.CanonicalHeaderKey(token.Header)

// Options configure a [Middleware]. Zero fields select defaults; [New]
// validates them once.
type Options struct {
	// Resource derives the resource key from the request — from the route,
	// never from anything else the client sends — and is required.
	// [ChiParam] and [PathValue] cover the usual "name:value" keys.
	//
	// It must map each resource to exactly one key, the key the store and
	// the handler use for it: two spellings of one resource would have two
	// high-water marks, and a stale holder could use the other one. An
	// error, or a key that is empty, longer than 512 bytes, not UTF-8 or
	// holds a control character, answers 404.
	Resource func(r *http.Request) (string, error)

	// Fence holds the high-water marks and is required: a
	// [*token.MemoryFence] for a resource served by one process; a shared
	// one (redislock.Fence, the storage/postgres fence) otherwise; or
	// [ClaimInStore] when the store behind the handler claims the token in
	// the same step as the access.
	Fence token.Fence

	// Require reports whether r must carry a token. A request that need
	// not and does not passes straight through, unchecked and without a
	// token in its context; one that carries a token is checked and claims
	// like any other. Default [RequireUnsafe].
	Require func(r *http.Request) bool

	// SerializePerKey makes requests for one resource key run one at a
	// time in this process: a per-key mutex is held from before the claim
	// until the wrapped handler returns, so claim and effect are atomic
	// against every other fenced request through this Middleware. A request
	// that ends (client gone, server shutting down) while it waits is
	// answered 503. Requests without a token are not serialized. The
	// mutex is held while the handler writes its response, so a slow
	// client holds up the key: keep such handlers short and the server's
	// WriteTimeout set.
	SerializePerKey bool

	// Check decides, before the claim, whether the token can have been
	// granted for the resource at all; a [*token.ForgedError] (or any
	// error wrapping [token.ErrForged]) answers 403, any other error 503,
	// and neither claims anything. It runs before [Options.SerializePerKey]
	// waits for the key, so a made-up token cannot hold up the key's honest
	// requests either. It receives the resource key; a
	// [token.SequencerCheck] maps it to the lock key (its LockKey option).
	//
	// Default [token.DefaultCheck]: a [token.ClockBound], which caps
	// clock-floored tokens (memlock, redislock, redlock) at the resource's
	// clock plus five minutes, with no round trip. With etcd's or
	// ZooKeeper's tokens, which are far below the clock, it bounds nothing:
	// add a [token.SequencerCheck] with [token.All]. [token.NoCheck] turns
	// the check off. See "Forged tokens" in the package doc.
	//
	// The Fence may run a check of its own in Claim (a
	// [*token.MemoryFence]'s Check, a backend fence's FenceOptions.Check);
	// its refusals answer the same 403.
	Check token.Check

	// ErrorWriter writes every refusal. Default [WriteProblem]. It receives
	// the [Problem] the middleware would write, with its cause in Err, and
	// must write a response (one that writes nothing answers 200 with an
	// empty body): the request does not reach the handler.
	ErrorWriter func(w http.ResponseWriter, r *http.Request, p *Problem)

	// Observe, if not nil, is called once for every request the
	// middleware handles, with its [Outcome] — every refusal, those made
	// before the Check and the Fence ever see the request included (a
	// missing, malformed, too long or doubled header; a request naming no
	// resource) — before the refusal is written or the handler runs. It
	// runs on the request's goroutine and must be quick; metrics/prom's
	// Metrics.HTTP is one.
	Observe func(r *http.Request, o Outcome)

	// Log, if not nil, logs refusals, rate-limited per result so that a
	// flood of bad requests cannot flood the log ([RefusalLog]). Nil logs
	// nothing: refusals are expected traffic, counted through Observe.
	Log *RefusalLog
}

// RequireUnsafe requires a token on every method but GET, HEAD and
// OPTIONS, which read and so may come without one. It is the default
// [Options.Require].
func RequireUnsafe(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// RequireAll requires a token on every request.
func RequireAll(*http.Request) bool { return true }

// Middleware enforces fencing tokens on the routes it wraps. Make one with
// [New]; the zero Middleware is not usable. It is safe for concurrent use;
// build one per family of routes that touch the same resources, so
// [Options.SerializePerKey] covers all of them.
type Middleware struct {
	o     Options
	locks *keyLocks // nil unless SerializePerKey
}

// New returns a Middleware for o. It fails with a descriptive error when a
// required option is missing.
func New(o Options) (*Middleware, error) {
	switch {
	case o.Resource == nil:
		return nil, errors.New("httpmw: Options.Resource is required")
	case o.Fence == nil:
		return nil, errors.New("httpmw: Options.Fence is required")
	}
	if o.Require == nil {
		o.Require = RequireUnsafe
	}
	if o.Check == nil {
		o.Check = token.DefaultCheck()
	}
	if o.ErrorWriter == nil {
		o.ErrorWriter = func(w http.ResponseWriter, _ *http.Request, p *Problem) { WriteProblem(w, p) }
	}
	m := &Middleware{o: o}
	if o.SerializePerKey {
		m.locks = new(keyLocks)
	}
	return m, nil
}

// Handler wraps next: a request reaches next only with a valid token that
// the Check and the Fence accepted for the request's resource, which next then finds in
// its context ([token.FromContext] gives the resource key and the token) —
// or, where [Options.Require] allows, with no token at all. Its type is
// that of net/http and chi middleware. It panics if next is nil, as
// [http.Handle] does.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	if next == nil {
		panic("httpmw: Handler(nil)")
	}
	return &fenced{m: m, next: next}
}

type fenced struct {
	m    *Middleware
	next http.Handler
}

func (h *fenced) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := h.m
	// All values, not Header.Get: two headers are ambiguous, and the
	// resource must not pick one that a proxy or log did not.
	vals := r.Header[headerKey]
	switch len(vals) {
	case 0:
		if m.o.Require(r) {
			m.refuse(w, r, problemMissing(), "", 0)
			return
		}
		m.pass(r, ResultUnfenced, "", 0)
		h.next.ServeHTTP(w, r)
		return
	case 1:
	default:
		m.refuse(w, r, problemDuplicate(), "", 0)
		return
	}
	t, err := token.Parse(vals[0])
	if err != nil {
		m.refuse(w, r, problemInvalid(err), "", 0)
		return
	}
	key, err := m.o.Resource(r)
	if err == nil {
		err = checkKey(key)
	}
	if err != nil {
		m.refuse(w, r, problemNoResource(err), "", t)
		return
	}
	ctx := r.Context()
	// Before the per-key wait: a forger must not even queue for the key.
	if err := m.o.Check.Check(ctx, key, t); err != nil {
		m.refuse(w, r, checkProblem(t, err), key, t)
		return
	}
	if m.locks != nil {
		l, err := m.locks.lock(ctx, key)
		if err != nil {
			m.refuse(w, r, problemUnavailable("the request ended while waiting for the resource", err), key, t)
			return
		}
		defer l.unlock()
	}
	if err := m.o.Fence.Claim(ctx, key, t); err != nil {
		m.refuse(w, r, claimProblem(t, err), key, t)
		return
	}
	m.pass(r, ResultAccepted, key, t)
	h.next.ServeHTTP(w, r.WithContext(token.NewContext(ctx, key, t)))
}

// claimProblem answers a refused claim. A stale token is a verdict; so is
// a forged one (the Fence's own check), and a token the Fence's store
// cannot hold (PostgreSQL's bigint stops at 2^63−1). Anything else means
// the check was not made, and not knowing is refusing.
func claimProblem(t token.Token, err error) *Problem {
	var se *token.StaleError
	switch {
	case errors.As(err, &se):
		return problemStale(se, err)
	case errors.Is(err, token.ErrForged):
		return problemForged(t, err)
	case errors.Is(err, token.ErrInvalid), errors.Is(err, token.ErrRange):
		p := problemInvalid(err)
		p.Detail = "the token is outside the range this resource's store accepts"
		return p
	}
	return problemUnavailable("the fencing check could not be made", err)
}

// checkProblem answers a refusal of [Options.Check]: forged, or not
// decided — which refuses too (fail closed).
func checkProblem(t token.Token, err error) *Problem {
	if errors.Is(err, token.ErrForged) {
		return problemForged(t, err)
	}
	return problemUnavailable("the fencing token could not be checked", fmt.Errorf("httpmw: check: %w", err))
}
