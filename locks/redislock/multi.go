package redislock

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock/internal/detach"
	"github.com/fenceguard/fenceguard/token"
)

var _ locks.MultiTryAcquirer = (*Locker)(nil)

// TryAcquireAll implements [locks.MultiTryAcquirer]: one script, one round
// trip, tries every key of keys — distinct, non-empty and sorted — and
// grants them all or none. Each key is granted on the condition of
// [Locker.TryAcquire] — its lock is free: like TryAcquire, it does not
// queue, and takes a lock that expired while waiters were queued for it —
// with a token of its own minted as TryAcquire mints it, and its lease is
// TryAcquire's. When a key is held it returns an error
// wrapping [locks.ErrNotObtained] that names it, and nothing is written.
//
// The keys must live on one node. On a Cluster, that is one hash slot:
// names sharing a hash tag ({order:7}:a, {order:7}:b) do, as do all names
// under a prefix with a hash tag of its own; for keys of several slots
// it fails with an error wrapping [locks.ErrInvalidArgument] before it
// sends anything (package guard then takes the keys one by one). On a
// [*redis.Ring], the keys' lock names must share one hash tag (the shard
// is chosen by it). A single node and a Sentinel's master take any keys.
func (l *Locker) TryAcquireAll(ctx context.Context, keys []string, ttl time.Duration) ([]locks.Lease, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no keys", locks.ErrInvalidArgument)
	}
	for i, k := range keys {
		if err := locks.CheckArgs(k, ttl, minTTL); err != nil {
			return nil, err
		}
		if i > 0 && keys[i-1] >= k {
			return nil, fmt.Errorf("%w: keys %q and %q are not sorted and distinct", locks.ErrInvalidArgument, keys[i-1], k)
		}
	}
	if l.closed.Load() {
		return nil, errClosed
	}
	for _, k := range keys {
		if err := checkSlot(l.client, l.o.Prefix, k); err != nil {
			return nil, err
		}
	}
	if err := oneNode(l.client, l.o.Prefix, keys); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ks := make([]lockKeys, len(keys))
	all := make([]string, 0, 4*len(keys))
	for i, k := range keys {
		ks[i] = l.keys(k)
		all = append(all, ks[i].all...)
	}
	id := newID()
	sent := time.Now()
	res, pending, err := detach.Start(&l.bg, ctx, func() ([]any, error) {
		return tryAllScript.Run(ctx, l.client, all, id, l.px(ttl), l.idleArg).Slice()
	})
	if err != nil {
		err = scriptErr(err)
		// The grant may have happened and its reply been lost.
		for _, k := range ks {
			l.abandon(ctx, pending, k, id, ttl)
		}
		return nil, acquireErr(ctx, strings.Join(keys, " "), err)
	}
	code, _ := res[0].(int64)
	switch {
	case code == 1 && len(res) == len(keys)+1:
		leases := make([]locks.Lease, len(keys))
		for i, k := range keys {
			s, _ := res[i+1].(string)
			tok, err := token.Parse(s)
			if err != nil {
				for _, k := range ks {
					l.abandon(ctx, nil, k, id, ttl)
				}
				return nil, fmt.Errorf("redislock: bad token from the acquire script: %w", err)
			}
			leases[i] = l.lease(ks[i], k, id, tok, ttl, sent.Add(ttl))
		}
		return leases, nil
	case code == 0 && len(res) == 2:
		if i, _ := res[1].(int64); i >= 1 && int(i) <= len(keys) {
			return nil, fmt.Errorf("redislock: try %q: %w", keys[i-1], locks.ErrNotObtained)
		}
	case code == 3 && len(res) == 3:
		if i, _ := res[1].(int64); i >= 1 && int(i) <= len(keys) {
			return nil, fmt.Errorf("redislock: acquire %q: %w", keys[i-1], rangeErr())
		}
	}
	return nil, fmt.Errorf("redislock: unexpected acquire reply %v", res)
}

// oneNode refuses keys whose locks one script cannot reach together: on a
// Cluster client, names in several hash slots; on a Ring, names of several
// hash tags. Other clients serve every key from one node.
func oneNode(c any, prefix string, keys []string) error {
	var same func(a, b string) bool
	switch c.(type) {
	case *redis.Ring:
		same = func(a, b string) bool { return hashTag(a) == hashTag(b) }
	case stateReloader:
		same = func(a, b string) bool { return slotOf(a) == slotOf(b) }
	default:
		return nil
	}
	first := prefix + "{" + keys[0] + "}"
	for _, k := range keys[1:] {
		if name := prefix + "{" + k + "}"; !same(first, name) {
			return fmt.Errorf("%w: keys %q and %q are on different Redis nodes (give them a common hash tag, as {order:7}:a and {order:7}:b, to try them in one round trip)", locks.ErrInvalidArgument, keys[0], k)
		}
	}
	return nil
}

// hashTag is the part of a Redis key name that Cluster and Ring hash: from
// the first '{' to the first '}' after it when that is not empty, else the
// whole name.
func hashTag(name string) string {
	if i := strings.IndexByte(name, '{'); i >= 0 {
		if j := strings.IndexByte(name[i+1:], '}'); j > 0 {
			return name[i+1 : i+1+j]
		}
	}
	return name
}

// slotOf is the Cluster hash slot of a key name: CRC16 (XMODEM) of its
// hash tag, modulo 16384.
func slotOf(name string) uint16 {
	var crc uint16
	for _, b := range []byte(hashTag(name)) {
		crc ^= uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc & 16383
}
