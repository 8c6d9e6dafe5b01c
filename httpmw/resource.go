package httpmw

import (
	"errors"
	"fmt"
	"hash/maphash"
	"net/http"
	"net/url"
	"sync/atomic"
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

// ChiParam returns an [Options.Resource] for routes served by chi (v5.0.12
// or later, which sets [http.Request.PathValue]): the key is name + ":" +
// the route's {name} parameter, so ChiParam("sku") maps /sku/42 on the
// route /sku/{sku} to "sku:42". Unlike [http.ServeMux], chi leaves the value
// escaped when the URL has an escaped form; ChiParam unescapes it, so that
// /sku/%34%32 and /sku/42 name one resource and meet one mark. Handlers
// name the resource the same way with [ChiValue] or [token.FromContext].
//
// Mount the middleware where chi has matched the parameter: on the route
// (Router.With) or inside Router.Route, not with Router.Use on a router
// above it. A request served without the parameter is refused with 404 and
// an error that says so.
func ChiParam(name string) func(*http.Request) (string, error) {
	keys := newKeyCache(name + ":")
	return func(r *http.Request) (string, error) {
		v, err := ChiValue(r, name)
		if err != nil {
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
// [http.ServeMux]: the key is name + ":" + r.PathValue(name), so
// PathValue("sku") maps /sku/42 on the pattern "PUT /sku/{sku}" to
// "sku:42". ServeMux unescapes wildcard values, so every spelling of a path
// yields one key. (On chi, use [ChiParam]: chi's values stay escaped.)
func PathValue(name string) func(*http.Request) (string, error) {
	keys := newKeyCache(name + ":")
	return func(r *http.Request) (string, error) {
		v := r.PathValue(name)
		if v == "" {
			return "", fmt.Errorf("httpmw: PathValue(%q): no value; is the pattern's wildcard {%s}?", name, name)
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
