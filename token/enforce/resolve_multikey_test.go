package enforce_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/enforce"
)

// From a context carrying several keys' tokens (a critical section over
// several keys, or sections nested in each other), the zero token resolves
// to the token of the very key fenced — the innermost one when a key is
// carried twice — and never to another key's: a key the context does not
// carry is refused as missing, naming it.
func TestResolveFromAMultiKeyContext(t *testing.T) {
	ctx := token.NewContext(context.Background(), "a", 11)
	ctx = token.NewContext(ctx, "b", 7)
	ctx = token.NewContext(ctx, "c", 9)
	ctx = token.NewContext(ctx, "a", 12) // a nested section over a again
	for key, want := range map[string]token.Token{"a": 12, "b": 7, "c": 9} {
		got, err := enforce.Resolve(ctx, key, 0)
		if err != nil || got != want {
			t.Errorf("Resolve(%q, 0) = %d, %v; want %d", key, got, err, want)
		}
		if got, err := enforce.Resolve(ctx, key, 3); err != nil || got != 3 {
			t.Errorf("Resolve(%q, 3) = %d, %v; want 3 as given", key, got, err)
		}
	}
	got, err := enforce.Resolve(ctx, "d", 0)
	if !errors.Is(err, token.ErrMissing) || got != 0 || !strings.Contains(err.Error(), `"d"`) {
		t.Errorf("Resolve(d, 0) = %d, %v; want ErrMissing naming d", got, err)
	}
	var f token.MemoryFence
	f.Check = token.NoCheck()
	if err := f.Claim(ctx, "b", 0); err != nil {
		t.Fatal(err)
	}
	if hw := f.HighWater("b"); hw != 7 {
		t.Errorf("b claimed at %d, want its own token 7", hw)
	}
	if err := f.Claim(ctx, "d", 0); !errors.Is(err, token.ErrMissing) {
		t.Errorf("Claim(d, 0) = %v, want ErrMissing", err)
	}
	if hw := f.HighWater("d"); hw != 0 {
		t.Errorf("d claimed at %d by a context that holds no token for it", hw)
	}
}
