package lockbench

import (
	"context"
	"time"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/token"
)

// HotCycle is a hot-key soak's cycle: acquire key with l, release.
func HotCycle(l locks.Locker, key string, ttl time.Duration) func(context.Context, int) error {
	return func(ctx context.Context, _ int) error {
		lease, err := l.Acquire(ctx, key, ttl)
		if err != nil {
			return err
		}
		return lease.Release(ctx)
	}
}

// FencedCycle is a distinct-keys soak's cycle: acquire the i-th distinct
// key with l, claim it in f with the lease's token, release.
func FencedCycle(l locks.Locker, ttl time.Duration, f token.Fence) func(context.Context, int) error {
	return func(ctx context.Context, i int) error {
		key := DistinctKey(i)
		lease, err := l.Acquire(ctx, key, ttl)
		if err != nil {
			return err
		}
		if err := f.Claim(ctx, key, lease.Token()); err != nil {
			_ = lease.Release(ctx)
			return err
		}
		return lease.Release(ctx)
	}
}
