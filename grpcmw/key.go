package grpcmw

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// maxKeyLen is the longest resource key the interceptor accepts, in bytes.
const maxKeyLen = 512

// errBadKey is what a resource key the interceptor refuses unwraps to.
var errBadKey = errors.New("grpcmw: bad resource key")

// checkKey keeps keys every Fence can store (PostgreSQL text takes neither
// NUL nor invalid UTF-8), so no request message can turn into a failure of
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

// maxEchoKey is the longest resource key a refusal names.
const maxEchoKey = 64

// echoKey returns key if a refusal may name it: short, visible ASCII
// ('!' through '~'). Otherwise "" — not a cut key, which could name
// another resource.
func echoKey(key string) string {
	if len(key) > maxEchoKey {
		return ""
	}
	for i := 0; i < len(key); i++ {
		if key[i] < '!' || key[i] > '~' {
			return ""
		}
	}
	return key
}
