package etcdlock

import (
	"context"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceguard/fenceguard/token"
)

// Fence is a [token.Fence] keeping each resource's high-water mark in an
// etcd key, for resources that live in etcd themselves. A claim is one
// transaction: marks are stored as 20-digit zero-padded decimals, so etcd's
// byte-wise value comparison orders them numerically, and
//
//	if value(mark) > presented then get(mark) else put(mark, presented)
//
// checks and advances in one step (a missing key compares false, so the
// first claim writes). Marks never expire: an expired mark would let a stale
// holder in.
type Fence struct {
	kv     clientv3.KV
	prefix string
}

var _ token.Fence = (*Fence)(nil)

// NewFence returns a Fence storing marks under prefix + resource (default
// prefix "/fenceguard/fence/").
func NewFence(kv clientv3.KV, prefix string) *Fence {
	if prefix == "" {
		prefix = "/fenceguard/fence/"
	}
	return &Fence{kv: kv, prefix: prefix}
}

func pad(t token.Token) string { return fmt.Sprintf("%020d", uint64(t)) }

// Claim implements [token.Fence]. One transaction.
func (f *Fence) Claim(ctx context.Context, resource string, t token.Token) error {
	if err := token.CheckClaim(resource, t); err != nil {
		return err
	}
	k := f.prefix + resource
	resp, err := f.kv.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(k), ">", pad(t))).
		Then(clientv3.OpGet(k)).
		Else(clientv3.OpPut(k, pad(t))).
		Commit()
	if err != nil {
		return fmt.Errorf("etcdlock: claim %q: %w", resource, err)
	}
	if !resp.Succeeded {
		return nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return fmt.Errorf("etcdlock: claim %q: high-water vanished during the claim", resource)
	}
	cur, err := strconv.ParseUint(string(kvs[0].Value), 10, 64)
	if err != nil {
		return fmt.Errorf("etcdlock: claim %q: high-water key holds %q: %w", resource, kvs[0].Value, err)
	}
	return &token.StaleError{Resource: resource, Presented: t, Current: token.Token(cur)}
}

// HighWater returns the highest token resource has accepted, 0 if none.
func (f *Fence) HighWater(ctx context.Context, resource string) (token.Token, error) {
	resp, err := f.kv.Get(ctx, f.prefix+resource)
	if err != nil {
		return 0, fmt.Errorf("etcdlock: high-water %q: %w", resource, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	v, err := strconv.ParseUint(string(resp.Kvs[0].Value), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("etcdlock: high-water %q holds %q: %w", resource, resp.Kvs[0].Value, err)
	}
	return token.Token(v), nil
}
