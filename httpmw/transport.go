package httpmw

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/fenceguard/fenceguard/token"
)

// maxProblem bounds how much of a 409 body the Transport reads to decide
// whether it is a stale-token problem.
const maxProblem = 64 << 10

// ErrNoKey is what [Transport.RoundTrip] returns, wrapped, for a request
// whose context carries a token when the Transport has no [Transport.Key]:
// without knowing which resource a request is for, the Transport cannot
// tell whether the token was granted for it, and does not guess.
var ErrNoKey = errors.New("httpmw: Transport.Key is nil: cannot tell whether the context's token is for this request's resource")

// Transport is the client side: an [http.RoundTripper] that sends the
// fencing token of the lease in the request's context to the resource it
// was granted for — and to nothing else — and reports the resource's
// refusal of a stale token as a [*token.StaleError].
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
// or the function context of guard.Do — the key and token of the
// innermost lease), the Transport asks [Transport.Key] which lock key the
// request's resource is guarded by:
//
//   - the context's key: the request is sent with the [token.Header]
//     header set, as a clone (the caller's request is never modified);
//   - another key, or none (a request for something unfenced, another
//     service, another resource): the request goes without the token, as a
//     plain request — a fenced route then refuses it as it refuses any
//     tokenless write (428), and a tokenless read passes unfenced;
//   - Key nil: RoundTrip refuses the request with an error wrapping
//     [ErrNoKey] and sends nothing, rather than send the token wherever
//     the request goes.
//
// A [token.Header] header the caller set is sent as it is, whatever Key
// says. Without a token in the context, the request goes out unchanged and
// Key is not asked.
//
// # Stale tokens
//
// A 409 response whose body is the middleware's stale-token problem
// ([TypeStale]), to a request that carried a token, means the lock is
// lost: a newer holder has claimed the resource, and the handler did not
// run. The Transport closes that response and returns a
// [*token.StaleError] (Resource, Presented and the resource's Current
// high-water, for healing a locker's counter) as its error; [http.Client]
// wraps it in a [*url.Error], and errors.As and errors.Is(err,
// token.ErrStale) see through that. Every other response, other 409s
// included, is returned untouched.
//
// (Interpreting this one response departs on purpose from RoundTripper's
// advice; docs/design.md, "Client", says why.) Put retrying transports
// inside it (as Base), not around it: a stale token stays stale.
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
	if lockKey, tok, ok := token.FromContext(req.Context()); ok && !tok.IsZero() && len(req.Header[headerKey]) == 0 {
		if t.Key == nil {
			if req.Body != nil { // a RoundTripper closes the body, even on errors
				_ = req.Body.Close()
			}
			return nil, fmt.Errorf("%w (the context carries the token of %q)", ErrNoKey, lockKey)
		}
		if key, ok := t.Key(req); ok && key == lockKey {
			req = req.Clone(req.Context())
			if req.Header == nil {
				req.Header = make(http.Header)
			}
			req.Header[headerKey] = []string{tok.String()}
			sent, sentKey = tok, key
		}
	}
	resp, err := base.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusConflict {
		return resp, err
	}
	if sent == 0 { // the caller's own header; the body should say, but in case
		if vals := req.Header[headerKey]; len(vals) == 1 {
			sent, _ = token.Parse(vals[0])
		}
	}
	if sent == 0 {
		return resp, nil // no token went out: no refusal of one
	}
	if stale := staleFrom(resp, sent, sentKey); stale != nil {
		return nil, stale
	}
	return resp, nil
}

// staleFrom returns the StaleError a 409 response carries, closing its
// body, or nil, leaving the response readable as it came. key is the
// resource key the token was sent for ("" if the caller set the header):
// the error's Resource when the body names none (the middleware leaves
// out keys unsafe to echo).
func staleFrom(resp *http.Response, sent token.Token, key string) *token.StaleError {
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || mt != ContentType || resp.Body == nil {
		return nil
	}
	b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxProblem+1))
	if rerr == nil && len(b) <= maxProblem {
		if se := decodeStale(b, sent); se != nil {
			_ = resp.Body.Close()
			if se.Resource == "" {
				se.Resource = key
			}
			return se
		}
	}
	// Not ours: hand the body back whole, the part read first.
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), resp.Body), resp.Body}
	return nil
}

func decodeStale(b []byte, sent token.Token) *token.StaleError {
	var p struct {
		Type      string          `json:"type"`
		Resource  string          `json:"resource"`
		Presented json.RawMessage `json:"presented"`
		Current   json.RawMessage `json:"current"`
	}
	if json.Unmarshal(b, &p) != nil || p.Type != TypeStale {
		return nil
	}
	current, ok := wireToken(p.Current)
	if !ok {
		return nil // a stale error without the high-water is of no use to heal with
	}
	presented, ok := wireToken(p.Presented)
	if !ok {
		presented = sent
	}
	return &token.StaleError{Resource: p.Resource, Presented: presented, Current: current}
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
