package postgres_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/fencetest"
)

func TestFenceConformance(t *testing.T) {
	t.Parallel()
	fencetest.Run(t, func(t *testing.T, check token.Check) fencetest.Subject {
		pool, _ := setup(t)
		marks, err := postgres.NewTokens(postgres.TokensOptions{Check: check, Logger: discard})
		if err != nil {
			t.Fatal(err)
		}
		f := marks.Fence(pool)
		return fencetest.Subject{Fence: f, HighWater: f.HighWater, MaxToken: math.MaxInt64} // bigint
	})
}

// A Fence on a high-water table of another name.
func TestFenceOtherTable(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxFor(t, time.Minute)
	marks, err := postgres.NewTokens(postgres.TokensOptions{Name: []string{"fencing", "marks"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := marks.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	f := marks.Fence(pool)
	if err := f.Claim(ctx, "r", 3); err != nil {
		t.Fatal(err)
	}
	stale(t, f.Claim(ctx, "r", 2), 2, 3)
	if hw, err := marks.HighWater(ctx, pool, "r"); err != nil || hw != 3 {
		t.Fatalf("HighWater = %d, %v", hw, err)
	}
	// The default table does not exist here.
	if err := postgres.NewFence(pool).Claim(ctx, "r", 4); !errors.Is(err, postgres.ErrSchema) {
		t.Fatalf("Claim without fence_tokens = %v, want ErrSchema", err)
	}
}
