package redislock

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/token"
)

// Fence is a [token.Fence] that keeps each resource's high-water mark in
// Redis, for resources served by several processes (the HTTP middleware
// uses it). The check-and-advance is one script, so concurrent claims from
// any number of processes see one order.
//
// High-water keys never expire: an expired mark would let a stale holder
// in. Each distinct resource costs one small key; delete the key of a
// resource that no longer exists, never of one that does.
type Fence struct {
	client FenceClient
	prefix string
}

var _ token.Fence = (*Fence)(nil)

// FenceClient is what a Fence needs of a Redis client; every
// [redis.UniversalClient] satisfies it.
type FenceClient interface {
	redis.Scripter
	Get(ctx context.Context, key string) *redis.StringCmd
}

// NewFence returns a Fence storing marks under prefix + "{" + resource + "}"
// (default prefix "fenceguard:fence:"). The hash tag keeps each resource's
// key in one cluster slot.
func NewFence(client FenceClient, prefix string) *Fence {
	if prefix == "" {
		prefix = "fenceguard:fence:"
	}
	return &Fence{client: client, prefix: prefix}
}

func (f *Fence) key(resource string) string { return f.prefix + "{" + resource + "}" }

// Claim implements [token.Fence]. One round trip.
func (f *Fence) Claim(ctx context.Context, resource string, t token.Token) error {
	if err := token.CheckClaim(resource, t); err != nil {
		return err
	}
	res, err := claimScript.Run(ctx, f.client, []string{f.key(resource)}, t.String()).Slice()
	if err != nil {
		return fmt.Errorf("redislock: claim %q: %w", resource, err)
	}
	if ok, _ := res[0].(int64); ok == 1 {
		return nil
	}
	s, _ := res[1].(string)
	cur, err := token.Parse(s)
	if err != nil {
		return fmt.Errorf("redislock: claim %q: high-water key holds %q: %w", resource, s, err)
	}
	return &token.StaleError{Resource: resource, Presented: t, Current: cur}
}

// HighWater returns the highest token resource has accepted, 0 if none.
func (f *Fence) HighWater(ctx context.Context, resource string) (token.Token, error) {
	s, err := f.client.Get(ctx, f.key(resource)).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("redislock: high-water %q: %w", resource, err)
	}
	return token.Parse(s)
}
