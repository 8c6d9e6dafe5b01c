package httpmw

import (
	"errors"
	"fmt"
	"hash/maphash"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode"
	"unicode/utf8"
)

// maxKeyLen is the longest resource key the middleware accepts, in bytes.
const maxKeyLen = 512

// errBadKey is what a resource key the middleware refuses unwraps to: empty,
// longer than maxKeyLen, not UTF-8, or holding a control character. Such a
// request gets a 404: it names no resource the route fences.
var errBadKey = errors.New("httpmw: bad resource key")

// checkKey keeps keys every Fence can store (PostgreSQL text takes neither
// NUL nor invalid UTF-8), so no path a client sends can turn into a 5xx from
// the store, and none can smuggle line breaks into logs.
func checkKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", errBadKey)
	case len(key) > maxKeyLen:
		return fmt.Errorf("%w: longer than %d bytes", errBadKey, maxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: not UTF-8", errBadKey)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c == 0x7f {
			return fmt.Errorf("%w: control character at offset %d", errBadKey, i)
		}
	}
	return nil
}

// keyTemplate is a parsed key template ([PathValue] documents the form).
type keyTemplate struct {
	prefix string
	name   string
	isInt  bool
}

// parseTemplate parses a key template for the function fn.
func parseTemplate(fn, tmpl string) (keyTemplate, error) {
	open := strings.IndexByte(tmpl, '{')
	if open < 0 {
		if !isWildcardName(tmpl) {
			return keyTemplate{}, fmt.Errorf("httpmw: %s(%q): want a key template such as \"account:{id}\", or a wildcard name", fn, tmpl)
		}
		return keyTemplate{prefix: tmpl + ":", name: tmpl}, nil
	}
	kt := keyTemplate{prefix: tmpl[:open]}
	inner, ok := strings.CutSuffix(tmpl[open+1:], "}")
	switch {
	case !ok || strings.ContainsAny(inner, "{}"):
		return keyTemplate{}, fmt.Errorf("httpmw: %s(%q): the template must end with its one wildcard, as in \"account:{id}\"", fn, tmpl)
	case kt.prefix == "" || strings.ContainsRune(kt.prefix, '}'):
		return keyTemplate{}, fmt.Errorf("httpmw: %s(%q): the key needs a prefix naming the kind of resource, as in \"account:{id}\"", fn, tmpl)
	}
	if name, typ, ok := strings.Cut(inner, ":"); ok {
		if typ != "int" {
			return keyTemplate{}, fmt.Errorf("httpmw: %s(%q): unknown wildcard type %q (want {%s} or {%s:int})", fn, tmpl, typ, name, name)
		}
		inner, kt.isInt = name, true
	}
	if !isWildcardName(inner) {
		return keyTemplate{}, fmt.Errorf("httpmw: %s(%q): %q is not a wildcard name", fn, tmpl, inner)
	}
	kt.name = inner
	return kt, nil
}

// mustTemplate is parseTemplate for the functions that cannot return an
// error.
func mustTemplate(fn, tmpl string) keyTemplate {
	kt, err := parseTemplate(fn, tmpl)
	if err != nil {
		panic(err)
	}
	return kt
}

// isWildcardName reports whether s is a name [http.ServeMux] accepts for a
// wildcard: a Go identifier.
func isWildcardName(s string) bool {
	for i, c := range s {
		if c != '_' && !unicode.IsLetter(c) && (i == 0 || !unicode.IsDigit(c)) {
			return false
		}
	}
	return s != ""
}

// errNotInt is what a value that is not a canonical integer unwraps to.
var errNotInt = errors.New("not an integer in canonical decimal form")

// value checks a wildcard's value against the template.
func (kt keyTemplate) value(fn, v string) error {
	if kt.isInt && !canonicalInt(v) {
		// The value is not echoed: it is the client's input.
		return fmt.Errorf("httpmw: %s: the {%s} value is %w", fn, kt.name, errNotInt)
	}
	return nil
}

// canonicalInt reports whether s is an int64 written as strconv.FormatInt
// writes it.
func canonicalInt(s string) bool {
	v, err := strconv.ParseInt(s, 10, 64)
	return err == nil && strconv.FormatInt(v, 10) == s
}

// ChiParam returns an [Options.Resource] for routes served by chi (v5.0.12
// or later, which sets [http.Request.PathValue]): the key follows the key
// template as in [PathValue], so ChiParam("account:{id}") maps /accounts/7
// on the route /accounts/{id} to "account:7", and ChiParam("sku") maps
// /sku/42 on /sku/{sku} to "sku:42". Unlike [http.ServeMux], chi leaves the
// value escaped when the URL has an escaped form; ChiParam unescapes it, so
// that /sku/%34%32 and /sku/42 name one resource and meet one mark.
// Handlers name the resource the same way with [ChiValue] or
// [token.FromContext].
//
// Mount the middleware where chi has matched the parameter: on the route
// (Router.With) or inside Router.Route, not with Router.Use on a router
// above it. A request served without the parameter is refused with 404 and
// an error that says so. ChiParam panics on a malformed template.
func ChiParam(template string) func(*http.Request) (string, error) {
	kt := mustTemplate("ChiParam", template)
	keys := newKeyCache(kt.prefix)
	return func(r *http.Request) (string, error) {
		v, err := ChiValue(r, kt.name)
		if err != nil {
			return "", err
		}
		if err := kt.value("ChiParam", v); err != nil {
			return "", err
		}
		return keys.key(v), nil
	}
}

// ChiValue returns the route's {name} parameter unescaped exactly as
// [ChiParam] does, so a handler that names the item by it names the
// resource the middleware claimed.
func ChiValue(r *http.Request, name string) (string, error) {
	v := r.PathValue(name)
	if v == "" {
		return "", fmt.Errorf("httpmw: ChiParam(%q): the request has no {%s} path value; mount the middleware on the route (With, or Use inside Route), not above the router that matches it, and use chi v5.0.12 or later", name, name)
	}
	if r.URL != nil && r.URL.RawPath != "" {
		// chi routed on the escaped path, so v is still escaped.
		u, err := url.PathUnescape(v)
		if err != nil {
			return "", fmt.Errorf("httpmw: ChiParam(%q): %w", name, err)
		}
		v = u
	}
	if v == "" {
		return "", fmt.Errorf("httpmw: ChiParam(%q): empty value", name)
	}
	return v, nil
}

// PathValue returns an [Options.Resource] for routes served by
// [http.ServeMux]. The key template says how the route names its resource:
// a prefix naming the kind of resource, then the value of one wildcard:
//
//   - "prefix{name}": the key is prefix + r.PathValue(name), so
//     PathValue("account:{id}") maps /accounts/7/debit on the pattern
//     "POST /accounts/{id}/debit" to "account:7" — never the key of an
//     order's "order:7". The prefix must not be empty.
//   - "prefix{name:int}": the same, and the value must be an integer in
//     its canonical decimal form, as [strconv.FormatInt] writes it: no
//     leading zero, no '+', no space, '-' only before a non-zero number,
//     within int64. A value in any other form ("01", "+1", " 1") names no
//     resource and the middleware answers 404, so "01" and "1" can never
//     be two locks of one row; a handler that parses the value with
//     [strconv.ParseInt] gets the number the key names.
//   - "name" alone: the same as "name:{name}", so PathValue("sku") maps
//     /sku/42 on "PUT /sku/{sku}" to "sku:42".
//
// Give every kind of resource its own prefix: two kinds whose keys meet
// share one mark, and a holder of one is refused as stale by the other's.
// ServeMux unescapes wildcard values, so every spelling of a path yields
// one key. (On chi, use [ChiParam]: chi's values stay escaped.) [ChiParam]
// and [RouteKey] take the same templates. PathValue panics on a malformed
// template, as [regexp.MustCompile] does.
func PathValue(template string) func(*http.Request) (string, error) {
	kt := mustTemplate("PathValue", template)
	keys := newKeyCache(kt.prefix)
	return func(r *http.Request) (string, error) {
		v := r.PathValue(kt.name)
		if v == "" {
			return "", fmt.Errorf("httpmw: PathValue(%q): no value; is the pattern's wildcard {%s}?", template, kt.name)
		}
		if err := kt.value("PathValue", v); err != nil {
			return "", err
		}
		return keys.key(v), nil
	}
}

// keyCache remembers recently built keys, so that requests for a hot
// resource do not allocate its key string each time. It is a small
// direct-mapped table: fixed memory, no lock; a miss or a collision just
// builds the key.
type keyCache struct {
	prefix string
	seed   maphash.Seed
	slots  [256]atomic.Pointer[string] // each prefix+value, immutable once stored
}

func newKeyCache(prefix string) *keyCache {
	return &keyCache{prefix: prefix, seed: maphash.MakeSeed()}
}

func (c *keyCache) key(v string) string {
	slot := &c.slots[maphash.String(c.seed, v)%uint64(len(c.slots))]
	if k := slot.Load(); k != nil && len(*k) == len(c.prefix)+len(v) && (*k)[len(c.prefix):] == v {
		return *k
	}
	k := c.prefix + v
	slot.Store(&k)
	return k
}
