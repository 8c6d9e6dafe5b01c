package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// Inside guard.DoAll over {a, b}, a TxAll over both does not commit once
// either lease has ended, also from a section nested in the set: a
// re-entrant Do(b), or a Do of another key, reports the earliest end of
// all the leases around it, not its own lease's alone.
//
// The context's cancellation is what normally stops the commit; it is
// detached here (context.WithoutCancel) to stand for the window before it
// lands — a holder frozen, or the keep-alive goroutine not yet scheduled —
// which is exactly what the lease end carried in the context is for.
func TestNestedDoInDoAllKeepsTheSetsLeaseEnd(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxFor(t, 30*time.Second)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	l := memlock.New()
	g, err := guard.New(l, guard.Options{TTL: 10 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	// inner: "" runs the TxAll in DoAll's own fn (the control: refused);
	// "b" in a Do nested on the set's own key b; "c" in a Do of a key of
	// its own, c, claimed too.
	for i, inner := range []string{"", "b", "c"} {
		a, b, c := fmt.Sprint("a", i), fmt.Sprint("b", i), fmt.Sprint("c", i)
		claims := map[string]token.Token{a: 0, b: 0}
		if inner == "c" {
			claims[c] = 0
		}
		var txErr error
		_ = g.DoAll(ctx, []string{a, b}, func(ctx context.Context, _ map[string]token.Token) error {
			body := func(ctx context.Context) error {
				// a's lease ends; the section has not heard of it yet.
				frozen := context.WithoutCancel(ctx)
				l.Break(a)
				time.Sleep(50 * time.Millisecond) // a's loss is known to the guard
				if end, ok := token.Expiry(frozen); !ok || end.After(time.Now()) {
					t.Logf("nested Do of %q: token.Expiry reports %v from now, though a's lease has ended", inner, time.Until(end))
				}
				txErr = postgres.TxAll(frozen, pool, claims, func(pgx.Tx) error { return nil })
				return nil
			}
			if inner == "" {
				return body(ctx)
			}
			key := b
			if inner == "c" {
				key = c
			}
			return g.Do(ctx, key, func(ctx context.Context, _ token.Token) error { return body(ctx) })
		})
		if !errors.Is(txErr, postgres.ErrHoldExpired) {
			t.Errorf("nested Do of %q: TxAll after a's lease ended: %v, want ErrHoldExpired (nothing committed)", inner, txErr)
		}
	}
}

// The same the other way round: a DoAll over {b, c} nested in a Do over a
// reports a's lease end too, and a TxAll over {a, b, c} in it does not
// commit after a's lease has ended.
func TestNestedDoAllInDoKeepsTheEnclosingLeaseEnd(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := ctxFor(t, 30*time.Second)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	l := memlock.New()
	g, err := guard.New(l, guard.Options{TTL: 10 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var txErr error
	_ = g.Do(ctx, "a", func(ctx context.Context, _ token.Token) error {
		return g.DoAll(ctx, []string{"b", "c"}, func(ctx context.Context, _ map[string]token.Token) error {
			frozen := context.WithoutCancel(ctx)
			l.Break("a")
			time.Sleep(50 * time.Millisecond)
			if end, ok := token.Expiry(frozen); !ok || end.After(time.Now()) {
				t.Logf("token.Expiry reports %v from now, though a's lease has ended", time.Until(end))
			}
			txErr = postgres.TxAll(frozen, pool, map[string]token.Token{"a": 0, "b": 0, "c": 0}, func(pgx.Tx) error { return nil })
			return nil
		})
	})
	if !errors.Is(txErr, postgres.ErrHoldExpired) {
		t.Errorf("TxAll after a's lease ended: %v, want ErrHoldExpired (nothing committed)", txErr)
	}
}
