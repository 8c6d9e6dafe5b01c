package grpcmw_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fenceguard/fenceguard/grpcmw"
	"github.com/fenceguard/fenceguard/token"
)

// TestResourceKeysOverTheWire checks the keys a Resource func returns, on
// a real server: every key the interceptor refuses answers
// INVALID_ARGUMENT without creating a mark, a key at the limit is
// claimed, and a Resource that panics, behind a recovery interceptor,
// leaves the server serving the key.
func TestResourceKeysOverTheWire(t *testing.T) {
	keys := map[string]string{
		"empty":         "",
		"513 bytes":     strings.Repeat("k", 513),
		"NUL":           "sku:\x001",
		"line feed":     "sku:1\nlevel=error",
		"DEL":           "sku:1\x7f",
		"invalid UTF-8": "sku:\xff",
		"512 bytes":     strings.Repeat("k", 512),
		"non-ASCII":     "sku:é",
		"panic":         "",
		"after panic":   "sku:p",
	}
	fence := new(token.MemoryFence)
	fg := newLoopInterceptor(t, grpcmw.Options{
		Fence: fence,
		Resource: func(ctx context.Context, method string, req any) (string, error) {
			name, err := loopResource(ctx, method, req)
			if name == "panic" {
				panic("resource: boom")
			}
			return keys[name], err
		},
	})
	cc := loopServe(t, fg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name string
		want codes.Code
	}{
		{"empty", codes.InvalidArgument},
		{"513 bytes", codes.InvalidArgument},
		{"NUL", codes.InvalidArgument},
		{"line feed", codes.InvalidArgument},
		{"DEL", codes.InvalidArgument},
		{"invalid UTF-8", codes.InvalidArgument},
		{"512 bytes", codes.OK},
		{"non-ASCII", codes.OK},
		{"panic", codes.Internal},
		{"after panic", codes.OK},
	} {
		n := fence.Len()
		if err := loopPut(ctx, cc, tc.name, 7); status.Code(err) != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		grew := fence.Len() - n
		if tc.want == codes.OK && grew != 1 || tc.want != codes.OK && grew != 0 {
			t.Errorf("%s: the fence grew by %d keys", tc.name, grew)
		}
	}
}
