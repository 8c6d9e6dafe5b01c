package httpmw

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/fenceguard/fenceguard/token"
)

// maxProblem bounds how much of a problem body the Transport reads to
// decide whether it is one of this package's.
const maxProblem = 64 << 10

// ErrNoKey is what [Transport.RoundTrip] returns, wrapped, for a request
// whose context carries a token when the Transport has no [Transport.Key]:
// without knowing which resource a request is for, the Transport cannot
// tell whether the token was granted for it, and does not guess.
var ErrNoKey = errors.New("httpmw: Transport.Key is nil: cannot tell whether the context's token is for this request's resource")

// Transport is the client side: an [http.RoundTripper] that sends the
// fencing token of the lease in the request's context to the resource it
// was granted for — and to nothing else — and returns the resource's
// refusals as errors: a stale token as a [*token.StaleError], and so on.
//
//	key, err := httpmw.RouteKey("sku", "/sku/{sku}") // the server's route
//	...
//	client := &http.Client{Transport: &httpmw.Transport{Key: key}}
//	err = g.Do(ctx, "sku:42", func(ctx context.Context, _ token.Token) error {
//		req, _ := http.NewRequestWithContext(ctx, "PUT", base+"/sku/42", body)
//		resp, err := client.Do(req) // carries X-Fencing-Token
//		...
//	})
//
// # Requests
//
// A token is meaningful only for the lock it was granted for: sent to
// another resource, it would claim that resource with a token its lock
// never granted, and refuse that resource's honest holder. So when the
// context carries a token ([token.FromContext]: a guard lease's context,
// or the function context of guard.Do or guard.DoAll), the Transport
// asks [Transport.Key] which lock key the request's resource is guarded
// by:
//
//   - a key the context holds ([token.Lookup]): the request is sent with
//     that key's token in the [token.Header] header, as a clone (the
//     caller's request is never modified);
//   - another key, or none (a request for something unfenced, another
//     service, another resource): the request goes without the token, as a
//     plain request — a fenced route then refuses it as it refuses any
//     tokenless write (428), and a tokenless read passes unfenced;
//   - Key nil: RoundTrip refuses the request with an error wrapping
//     [ErrNoKey] and sends nothing, rather than send the token wherever
//     the request goes.
//
// A [token.Header] header the caller set (under any spelling of its name)
// is sent as it is, whatever Key says — except on a redirect to another
// host, where it is dropped, as [http.Client] drops Authorization. Without
// a token in the context, the request goes out unchanged and Key is not
// asked.
//
// # Refusals
//
// A response whose body is one of this package's problems (its type one
// of the Type constants: a refusal of the middleware, or an answer of
// [WriteError]) is the fencing layer's answer, not the application's. The
// Transport closes it and returns a [*Problem] as its error, whose Err is
// the typed error the problem stands for, so errors.Is and errors.As see
// it through the *url.Error [http.Client] wraps it in:
//
//   - [TypeStale], to a request that carried a token, naming the mark: a
//     [*token.StaleError] (Resource, Presented and the resource's Current
//     high-water, for healing a locker's counter). The lock is lost: a
//     newer holder has claimed the resource, and nothing was done.
//   - [TypeForged], to a request that carried a token: a
//     [*token.ForgedError] with the Bound it exceeded.
//   - [TypeCondition]: [token.ErrCondition]; [TypeNoResource]:
//     [token.ErrNotFound]; [TypeMissing]: [token.ErrMissing];
//     [TypeInvalid]: [token.ErrInvalid].
//   - [TypeKeyMismatch]: [ErrKeyMismatch]; [TypeUnavailable]:
//     [ErrUnavailable].
//
// A stale or forged verdict is checked against the request: it counts
// only if the request carried a token, and only if what the body says
// does not contradict it (the token presented, a mark above it, a bound
// below it, a resource key a server would echo). A stale verdict without
// a mark gives a StaleError whose Current is 0: not told.
//
// Every other response — other problem types, a service's own, included —
// is returned untouched. To tell, the Transport reads up to 64 KiB of an
// application/problem+json error body before returning (bounded by the
// request's context); it recognises a refusal only in a body it can read:
// not in the answer to a HEAD request, which has none (check its status),
// nor in one compressed under an Accept-Encoding the caller set itself. (Interpreting these responses departs on purpose
// from RoundTripper's advice; docs/design.md, "Client", says why.) Put
// retrying transports inside it (as Base), not around it: a stale token
// stays stale.
//
// The zero Transport sends no token (it refuses requests that carry one)
// and is safe for concurrent use, as is any Transport whose Key is.
type Transport struct {
	// Base sends the requests. Default [http.DefaultTransport].
	Base http.RoundTripper

	// Key maps a request to the key of the lock that guards the resource
	// it is for — the lock key a holder takes to act on that resource —
	// and reports false for a request that is for no fenced resource.
	// The token in the context goes only to requests whose key is the
	// context's. It must derive the key the way the server derives its
	// resource key (and the resource key must map to the lock key the
	// holders take); [RouteKey] builds one from the server's route. It is
	// asked only for requests whose context carries a token and which
	// have no header of their own; nil refuses those ([ErrNoKey]).
	Key func(r *http.Request) (key string, ok bool)
}

// RoundTrip implements [http.RoundTripper].
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	sent, sentKey := token.Token(0), ""
	own := ownHeader(req.Header)
	if own != "" && req.Response != nil && !sameHost(req.URL, req.Response.Request.URL) {
		// A redirect to another host: http.Client copies the caller's
		// headers to it, as it would not copy Authorization.
		req = req.Clone(req.Context())
		delete(req.Header, own)
		own = ""
	}
	if lockKey, tok, ok := token.FromContext(req.Context()); ok && !tok.IsZero() && own == "" {
		if t.Key == nil {
			if req.Body != nil { // a RoundTripper closes the body, even on errors
				_ = req.Body.Close()
			}
			return nil, fmt.Errorf("%w (the context carries the token of %q)", ErrNoKey, lockKey)
		}
		if key, ok := t.Key(req); ok {
			if tok, held := token.Lookup(req.Context(), key); held {
				req = req.Clone(req.Context())
				if req.Header == nil {
					req.Header = make(http.Header)
				}
				req.Header[headerKey] = []string{tok.String()}
				sent, sentKey = tok, key
			}
		}
	}
	resp, err := base.RoundTrip(req)
	if err != nil || resp.StatusCode < 400 {
		return resp, err
	}
	if own != "" { // the caller's own header
		if vals := req.Header[own]; len(vals) == 1 {
			sent, _ = token.Parse(vals[0])
		}
	}
	if p := problemFrom(resp, sent, sentKey); p != nil {
		return nil, p
	}
	return resp, nil
}

// ownHeader returns the key under which the caller set the token header,
// in any case, or "".
func ownHeader(h http.Header) string {
	if _, ok := h[headerKey]; ok {
		return headerKey
	}
	for k := range h {
		if strings.EqualFold(k, headerKey) {
			return k
		}
	}
	return ""
}

// sameHost reports whether a and b name the same host and port.
func sameHost(a, b *url.URL) bool {
	return a != nil && b != nil && strings.EqualFold(a.Host, b.Host)
}

// problemFrom returns the refusal a response carries as a *Problem whose
// Err is its typed error, closing the body, or nil, leaving the response
// readable as it came. sent is the token the request carried (0: none),
// key the resource key it was sent for ("" if the caller set the header):
// what the error names when the body does not (the middleware leaves out
// keys unsafe to echo).
func problemFrom(resp *http.Response, sent token.Token, key string) *Problem {
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || mt != ContentType || resp.Body == nil {
		return nil
	}
	b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxProblem+1))
	if rerr == nil && len(b) <= maxProblem {
		if p := decodeProblem(b, sent, key); p != nil {
			_ = resp.Body.Close()
			p.Status = resp.StatusCode
			return p
		}
	}
	// Not ours: hand the body back whole, the part read first.
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), resp.Body), resp.Body}
	return nil
}

// decodeProblem decodes a problem body of one of this package's types,
// and returns nil for anything else — among which a verdict on the token
// that contradicts what the request sent.
func decodeProblem(b []byte, sent token.Token, key string) *Problem {
	// Members by their exact names (encoding/json would match "TYPE" to
	// a field named Type).
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	var w struct{ Type, Title, Detail, Resource string }
	for name, dst := range map[string]*string{"type": &w.Type, "title": &w.Title, "detail": &w.Detail, "resource": &w.Resource} {
		if raw, ok := m[name]; ok && json.Unmarshal(raw, dst) != nil {
			return nil
		}
	}
	if !strings.HasPrefix(w.Type, typeBase) {
		return nil
	}
	p := &Problem{Type: w.Type, Title: w.Title, Detail: w.Detail, Resource: w.Resource}
	var ok [3]bool
	p.Presented, ok[0] = wireToken(m["presented"])
	p.Current, ok[1] = wireToken(m["current"])
	p.Bound, ok[2] = wireToken(m["bound"])
	switch w.Type {
	case TypeStale, TypeForged:
		// A verdict on the token sent: on a token the request did not
		// carry, on another token, naming a resource no server would
		// echo, or contradicting itself, it is none.
		switch {
		case sent == 0,
			m["presented"] != nil && (!ok[0] || p.Presented != sent),
			p.Resource != "" && echoKey(p.Resource) == "",
			w.Type == TypeStale && m["current"] != nil && (!ok[1] || p.Current <= sent),
			w.Type == TypeForged && m["bound"] != nil && (!ok[2] || p.Bound >= sent):
			return nil
		}
		p.Presented = sent
		if p.Resource == "" {
			p.Resource = key
		}
	}
	switch w.Type {
	case TypeStale:
		p.Err = &token.StaleError{Resource: p.Resource, Presented: p.Presented, Current: p.Current}
	case TypeForged:
		p.Err = &token.ForgedError{Resource: p.Resource, Presented: p.Presented, Bound: p.Bound}
	case TypeInvalid:
		p.Err = token.ErrInvalid
	case TypeMissing:
		p.Err = token.ErrMissing
	case TypeNoResource:
		p.Err = token.ErrNotFound
	case TypeCondition:
		p.Err = token.ErrCondition
	case TypeKeyMismatch:
		p.Err = ErrKeyMismatch
	case TypeUnavailable:
		p.Err = ErrUnavailable
	default:
		return nil
	}
	return p
}

// wireToken reads a token written as a JSON string ("6", as the middleware
// writes it) or, from other servers, a JSON number.
func wireToken(raw json.RawMessage) (token.Token, bool) {
	s := strings.TrimSpace(string(raw))
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	t, err := token.Parse(s)
	return t, err == nil
}
