package httpmw

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/fenceguard/fenceguard/token"
)

// maxProblem bounds how much of a 409 body the Transport reads to decide
// whether it is a stale-token problem.
const maxProblem = 64 << 10

// Transport is the client side: an [http.RoundTripper] that sends the
// fencing token of the lease in the request's context, and reports the
// resource's refusal of a stale token as a [*token.StaleError].
//
//	client := &http.Client{Transport: &httpmw.Transport{}}
//	err := g.Do(ctx, "sku:42", func(ctx context.Context, _ token.Token) error {
//		req, _ := http.NewRequestWithContext(ctx, "PUT", url, body)
//		resp, err := client.Do(req) // carries X-Fencing-Token
//		...
//	})
//
// # Requests
//
// When the context carries a token ([token.FromContext]: a guard lease's
// context, or the function context of guard.Do) and the request has no
// [token.Header] header of its own, the Transport sends a clone of the
// request with the header set; the caller's request is never modified. A
// header the caller set is sent as it is. Without a token in the context,
// the request goes out unchanged. The token goes to whatever server the
// request is for.
//
// # Stale tokens
//
// A 409 response whose body is the middleware's stale-token problem
// ([TypeStale]) means the lock is lost: a newer holder has claimed the
// resource, and the handler did not run. The Transport closes that
// response and returns a [*token.StaleError] (Resource, Presented and the
// resource's Current high-water, for healing a locker's counter) as its
// error; [http.Client] wraps it in a [*url.Error], and errors.As and
// errors.Is(err, token.ErrStale) see through that. Every other response,
// other 409s included, is returned untouched.
//
// That departs, on purpose and for this one response, from RoundTripper's
// advice not to interpret responses: the refusal is the fencing layer's,
// not the application's, and an error is what survives every layer
// between the caller and the transport (generated API clients, wrappers
// that map statuses to their own errors) with its type intact. Put
// retrying transports inside it (as Base), not around it: a stale token
// stays stale.
//
// The zero Transport is ready to use and is safe for concurrent use.
type Transport struct {
	// Base sends the requests. Default [http.DefaultTransport].
	Base http.RoundTripper
}

// RoundTrip implements [http.RoundTripper].
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	sent := token.Token(0)
	if _, tok, ok := token.FromContext(req.Context()); ok && !tok.IsZero() && len(req.Header[headerKey]) == 0 {
		req = req.Clone(req.Context())
		if req.Header == nil {
			req.Header = make(http.Header)
		}
		req.Header[headerKey] = []string{tok.String()}
		sent = tok
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
	if stale := staleFrom(resp, sent); stale != nil {
		return nil, stale
	}
	return resp, nil
}

// staleFrom returns the StaleError a 409 response carries, closing its
// body, or nil, leaving the response readable as it came.
func staleFrom(resp *http.Response, sent token.Token) *token.StaleError {
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || mt != ContentType || resp.Body == nil {
		return nil
	}
	b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxProblem+1))
	if rerr == nil && len(b) <= maxProblem {
		if se := decodeStale(b, sent); se != nil {
			_ = resp.Body.Close()
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
