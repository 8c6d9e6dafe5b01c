package etcdlock

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/enforce"
)

// FenceOptions configure a [Fence]. Zero fields select defaults.
type FenceOptions struct {
	// Prefix starts every mark's key: the mark of resource r is Prefix + r.
	// Default "/fenceguard/fence/".
	Prefix string

	// Check runs before every claim ([enforce.Admit]); nil is
	// [token.DefaultCheck], a [token.ClockBound]. etcd's tokens are
	// revisions, far below the clock in µs, so the clock bound passes every
	// one of them and stops only tokens made up far above the clock: use
	// token.SequencerCheck([NewSequencer](...)) to refuse any token above
	// the lock's current grant (see "Tokens" in the package doc).
	Check token.Check

	// Logger receives the audit record of every [Fence.Reset]; nil is
	// slog.Default().
	Logger *slog.Logger
}

// Fence is a [token.Fence] keeping each resource's high-water mark in an
// etcd key, for resources that live in etcd themselves. A claim is one
// transaction: marks are stored as 20-digit zero-padded decimals, so etcd's
// byte-wise value comparison orders them numerically over all of uint64,
// and
//
//	if value(mark) > presented then get(mark) else put(mark, presented)
//
// checks and advances in one step (a missing key compares false, so the
// first claim writes). Marks never expire: an expired mark would let a stale
// holder in.
//
// # Consistency
//
// Every decision is the outcome of that transaction, which etcd orders in
// its replicated log and evaluates on the applied state: linearizable,
// whichever member the client talks to. No decision rests on a read a
// lagging member could serve: a token equal to the mark is accepted by the
// Else branch, which writes it again — the "equal, so no write needed"
// shortcut that lets a stale holder past a lagging ZooKeeper follower has no
// counterpart here. [Fence.HighWater] is a linearizable read (etcd's
// default) and decides nothing.
//
// A Fence is safe for concurrent use.
type Fence struct {
	kv     clientv3.KV
	prefix string
	check  token.Check
	logger *slog.Logger
}

var (
	_ token.Fence    = (*Fence)(nil)
	_ token.Resetter = (*Fence)(nil)
)

// NewFence returns a Fence storing marks in kv under o.Prefix.
func NewFence(kv clientv3.KV, o FenceOptions) *Fence {
	if o.Prefix == "" {
		o.Prefix = "/fenceguard/fence/"
	}
	return &Fence{kv: kv, prefix: o.Prefix, check: o.Check, logger: o.Logger}
}

func pad(t token.Token) string { return fmt.Sprintf("%020d", uint64(t)) }

func parseMark(v []byte) (token.Token, error) {
	n, err := strconv.ParseUint(string(v), 10, 64)
	return token.Token(n), err
}

// Claim implements [token.Fence]: the fence's check ([enforce.Admit]), then
// one transaction that accepts and writes t unless the mark is above it. A
// refusal by the check touches nothing in etcd.
func (f *Fence) Claim(ctx context.Context, resource string, t token.Token) error {
	t, err := enforce.Resolve(ctx, resource, t)
	if err != nil {
		return err
	}
	if err := enforce.Admit(ctx, f.check, resource, t); err != nil {
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
	cur, err := parseMark(kvs[0].Value)
	if err != nil {
		return fmt.Errorf("etcdlock: claim %q: high-water key holds %q: %w", resource, kvs[0].Value, err)
	}
	return &token.StaleError{Resource: resource, Presented: t, Current: cur}
}

// Reset implements [token.Resetter]: one transaction sets the mark of
// exactly resource to to and returns the mark it replaced (0 when there was
// none); the audit record goes to the fence's Logger at Warn level. The
// check does not run: a reset is the operator's, not a holder's.
//
// A mark key holding something other than a token (written by hand) is
// replaced all the same — a reset is how such a key is repaired — and the
// error says what it held.
func (f *Fence) Reset(ctx context.Context, resource string, to token.Token) (token.Token, error) {
	if err := enforce.CheckReset(resource, to); err != nil {
		return 0, err
	}
	k := f.prefix + resource
	resp, err := f.kv.Txn(ctx).Then(clientv3.OpPut(k, pad(to), clientv3.WithPrevKV())).Commit()
	if err != nil {
		return 0, fmt.Errorf("etcdlock: reset %q: %w", resource, err)
	}
	var prev token.Token
	var perr error
	if pkv := resp.Responses[0].GetResponsePut().GetPrevKv(); pkv != nil {
		if prev, err = parseMark(pkv.Value); err != nil {
			prev = 0
			perr = fmt.Errorf("etcdlock: reset %q to %d: done, but the key replaced held %q, not a mark: %w", resource, to, pkv.Value, err)
		}
	}
	enforce.LogReset(ctx, f.logger, "etcd", resource, prev, to)
	return prev, perr
}

// HighWater returns the highest token resource has accepted, 0 if none. It
// is a linearizable read.
func (f *Fence) HighWater(ctx context.Context, resource string) (token.Token, error) {
	resp, err := f.kv.Get(ctx, f.prefix+resource)
	if err != nil {
		return 0, fmt.Errorf("etcdlock: high-water %q: %w", resource, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	v, err := parseMark(resp.Kvs[0].Value)
	if err != nil {
		return 0, fmt.Errorf("etcdlock: high-water %q holds %q: %w", resource, resp.Kvs[0].Value, err)
	}
	return v, nil
}
