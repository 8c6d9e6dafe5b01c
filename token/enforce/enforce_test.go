package enforce_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/enforce"
)

func TestAdmit(t *testing.T) {
	ctx := context.Background()
	called := false
	c := token.CheckFunc(func(context.Context, string, token.Token) error { called = true; return nil })
	if err := enforce.Admit(ctx, c, "", 5); !errors.Is(err, token.ErrNoResource) || called {
		t.Errorf("Admit with no resource = %v (check called: %v)", err, called)
	}
	if err := enforce.Admit(ctx, c, "r", 0); !errors.Is(err, token.ErrMissing) || called {
		t.Errorf("Admit with no token = %v (check called: %v)", err, called)
	}
	if err := enforce.Admit(ctx, nil, "r", math.MaxUint64); !errors.Is(err, token.ErrForged) {
		t.Errorf("Admit with the default check = %v, want forged", err)
	}
}
