package httpmw

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/fenceguard/fenceguard/token"
)

// ContentType is the media type of every error body the middleware writes
// (RFC 9457).
const ContentType = "application/problem+json"

// The problem types of fencing's answers, one per outcome: the
// middleware's refusals and what [WriteError] answers for a store's
// errors. Clients tell outcomes apart by Type, not by status or title.
// They are identifiers that name no branch or version, so they do not
// change when the code moves; fetched, they lead to this package's
// documentation.
const (
	TypeMissing     = typeBase + "missing-token"     // 428: no token on a route that requires one
	TypeInvalid     = typeBase + "invalid-token"     // 400: not the wire form, more than one header, or beyond the store's range
	TypeNoResource  = typeBase + "no-resource"       // 404: the request names no fenced resource, or the store has no such resource
	TypeForged      = typeBase + "forged-token"      // 403: above any token the lock can have granted ([Options.Check])
	TypeStale       = typeBase + "stale-token"       // 409: below the resource's high-water
	TypeCondition   = typeBase + "condition-not-met" // 409: the token was accepted, a condition of the access was false
	TypeKeyMismatch = typeBase + "key-mismatch"      // 500: the handler accessed another resource than the one the token was accepted for
	TypeUnavailable = typeBase + "fence-unavailable" // 503: the check could not be made, or the store could not be reached
)

const typeBase = "https://pkg.go.dev/github.com/fenceguard/fenceguard/httpmw#"

// Problem is an RFC 9457 problem details object: the body of every refusal
// the middleware answers with, and what [Options.ErrorWriter] receives.
//
// Tokens are written as JSON strings in their wire form ("6", not 6): many
// JSON parsers lose precision above 2^53.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`

	// Resource is the resource key the token was checked against, set
	// when the refusal is about that key's mark (stale) and the key is
	// safe to echo: at most 64 bytes of visible ASCII ('!'
	// through '~': no space, no control, format or bidirectional
	// character, nothing outside ASCII). Otherwise it is left out — not
	// cut, which could name another resource. It is derived by the server
	// from the route, never copied from a header, but the route comes from
	// the client's path; the full key is in Err's [token.StaleError].
	Resource string `json:"resource,omitempty"`
	// Presented is the token the request carried, when it parsed.
	Presented token.Token `json:"presented,omitzero"`
	// Current is the resource's high-water mark, when known (stale).
	Current token.Token `json:"current,omitzero"`
	// Bound is the largest token the check accepted when it refused this
	// one (forged), when the check says.
	Bound token.Token `json:"bound,omitzero"`

	// Err is the cause, for logging; it is never written to the client,
	// because it may name internals (a Redis address, a SQL error) or
	// carry the client's raw input.
	Err error `json:"-"`
}

// Error returns the problem's status, title and detail. A *Problem is the
// error [Transport] returns for a refusal (inside [http.Client]'s
// *url.Error); the title and detail then come from the server, so control
// and bidirectional-formatting characters in them are shown as U+FFFD,
// and cannot forge lines or colours in a log.
func (p *Problem) Error() string {
	if p == nil {
		return "httpmw: <nil> *Problem"
	}
	s := "httpmw: " + strconv.Itoa(p.Status) + " " + printable(p.Title)
	if p.Detail != "" {
		s += ": " + printable(p.Detail)
	}
	return s
}

// printable returns s with every control or bidirectional-formatting
// character (and invalid UTF-8) replaced by U+FFFD.
func printable(s string) string {
	clean := func(r rune) bool {
		return r != utf8.RuneError && !unicode.IsControl(r) && !unicode.Is(unicode.Bidi_Control, r)
	}
	for _, r := range s {
		if !clean(r) {
			return strings.Map(func(r rune) rune {
				if clean(r) {
					return r
				}
				return utf8.RuneError
			}, s)
		}
	}
	return s
}

// Unwrap returns Err: on the server the cause, on the client (from
// [Transport]) the typed error the problem stands for, so errors.Is and
// errors.As see through a Problem to it.
func (p *Problem) Unwrap() error { return p.Err }

// WriteProblem writes p as an application/problem+json response with
// status p.Status. A problem is an error: a Status outside 400–599 (or a
// nil p) is written as a 500, in the status line and the body alike, and
// the headers that would describe another representation
// (Content-Encoding, ETag, Last-Modified, …) are removed. Call it before
// anything of the response was written: once the status is out, no
// refusal can replace it. It is the default [Options.ErrorWriter]; custom
// writers may log and then call it.
func WriteProblem(w http.ResponseWriter, p *Problem) {
	if p == nil {
		p = &Problem{Type: "about:blank", Title: http.StatusText(http.StatusInternalServerError)}
	}
	if p.Status < 400 || p.Status > 599 {
		q := *p
		q.Status = http.StatusInternalServerError
		p = &q
	}
	body := p.appendJSON(make([]byte, 0, 256))
	body = append(body, '\n')
	// The keys are canonical already: assigning them skips Set's
	// canonicalization, a measurable share of a refusal's cost.
	h := w.Header()
	for _, k := range representationHeaders {
		if _, ok := h[k]; ok {
			delete(h, k)
		}
	}
	h["Content-Type"] = contentTypeValue
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	h["X-Content-Type-Options"] = nosniffValue
	h["Cache-Control"] = noStoreValue
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// representationHeaders describe a response body other than the problem's.
var representationHeaders = []string{
	"Content-Encoding", "Content-Range", "Content-Language", "Content-Location",
	"Content-Disposition", "Etag", "Last-Modified",
}

var (
	contentTypeValue = []string{ContentType}
	nosniffValue     = []string{"nosniff"}
	noStoreValue     = []string{"no-store"}
)

// appendJSON appends p as encoding/json would marshal it (the same members,
// order, omissions and escaping: control characters, <, >, &, U+2028 and
// U+2029 escaped, invalid UTF-8 as U+FFFD — the fuzz test compares the
// two), without reflection: refusals are the middleware's most frequent
// answer under attack.
func (p *Problem) appendJSON(b []byte) []byte {
	b = append(b, `{"type":`...)
	b = appendJSONString(b, p.Type)
	b = append(b, `,"title":`...)
	b = appendJSONString(b, p.Title)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(p.Status), 10)
	if p.Detail != "" {
		b = append(b, `,"detail":`...)
		b = appendJSONString(b, p.Detail)
	}
	if p.Resource != "" {
		b = append(b, `,"resource":`...)
		b = appendJSONString(b, p.Resource)
	}
	for _, m := range [...]struct {
		name string
		t    token.Token
	}{{`,"presented":"`, p.Presented}, {`,"current":"`, p.Current}, {`,"bound":"`, p.Bound}} {
		if !m.t.IsZero() {
			b = append(b, m.name...)
			b = strconv.AppendUint(b, uint64(m.t), 10)
			b = append(b, '"')
		}
	}
	return append(b, '}')
}

// appendJSONString appends s as a JSON string, escaped as encoding/json
// escapes it with HTML escaping on.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// WriteStale writes the 409 stale-token problem if err is or wraps a
// [*token.StaleError], and reports whether it did; otherwise it writes
// nothing. Most handlers want [WriteError], which answers this and every
// other error of a store enforcer. WriteStale is for a handler that maps
// its other errors itself: a holder the middleware let through can still
// be refused by the store (a newer holder claimed the row in between), and
// that refusal must reach the client as the same problem, so its
// [Transport] returns the same [*token.StaleError].
func WriteStale(w http.ResponseWriter, err error) bool {
	var se *token.StaleError
	if !errors.As(err, &se) || se == nil {
		return false
	}
	WriteProblem(w, problemStale(se, err))
	return true
}

func problemMissing() *Problem {
	return &Problem{
		Type:   TypeMissing,
		Title:  "Fencing token required",
		Status: http.StatusPreconditionRequired,
		Detail: "this request must carry the " + token.Header + " header of the lock it holds",
		Err:    token.ErrMissing,
	}
}

func problemDuplicate() *Problem {
	return &Problem{
		Type:   TypeInvalid,
		Title:  "Invalid fencing token",
		Status: http.StatusBadRequest,
		Detail: "more than one " + token.Header + " header",
		Err:    errDuplicate,
	}
}

func problemInvalid(err error) *Problem {
	detail := "the " + token.Header + " header is not a fencing token"
	var se *token.SyntaxError
	if errors.As(err, &se) {
		// The reason is ours; the input is not echoed.
		detail += ": " + se.Reason
	}
	return &Problem{
		Type:   TypeInvalid,
		Title:  "Invalid fencing token",
		Status: http.StatusBadRequest,
		Detail: detail,
		Err:    err,
	}
}

func problemNoResource(err error) *Problem {
	return &Problem{
		Type:   TypeNoResource,
		Title:  "No fenced resource",
		Status: http.StatusNotFound,
		Detail: "the request does not name a resource this route fences",
		Err:    err,
	}
}

func problemForged(t token.Token, err error) *Problem {
	p := &Problem{
		Type:      TypeForged,
		Title:     "Fencing token not granted",
		Status:    http.StatusForbidden,
		Detail:    "the token is above any token the lock can have granted for this resource",
		Presented: t,
		Err:       err,
	}
	var fe *token.ForgedError
	if errors.As(err, &fe) && fe != nil {
		p.Bound = fe.Bound
	}
	return p
}

// maxEchoKey is the longest resource key a 409 names ([Problem.Resource]).
const maxEchoKey = 64

// echoKey returns key if a problem may name it: short, visible ASCII.
func echoKey(key string) string {
	if len(key) > maxEchoKey || !safeText(key) {
		return ""
	}
	return key
}

// safeText reports whether s is only visible ASCII, '!' through '~'.
func safeText(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '!' || s[i] > '~' {
			return false
		}
	}
	return true
}

const (
	titleStale  = "Stale fencing token"
	detailStale = "a newer lock holder has claimed this resource: the lock was lost"
)

func problemStale(se *token.StaleError, err error) *Problem {
	return &Problem{
		Type:      TypeStale,
		Title:     titleStale,
		Status:    http.StatusConflict,
		Detail:    detailStale,
		Resource:  echoKey(se.Resource),
		Presented: se.Presented,
		Current:   se.Current,
		Err:       err,
	}
}

func problemUnavailable(detail string, err error) *Problem {
	return &Problem{
		Type:   TypeUnavailable,
		Title:  "Fencing check unavailable",
		Status: http.StatusServiceUnavailable,
		Detail: detail + "; the request was refused and nothing was done",
		Err:    err,
	}
}
