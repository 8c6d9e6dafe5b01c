package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceguard/fenceguard/locks"
)

var _ locks.MultiTryAcquirer = (*Locker)(nil)

// MaxTxnKeys is the most keys [Locker.TryAcquireAll] takes in one
// transaction: etcd's default --max-txn-ops, the most comparisons or
// operations a transaction may hold.
const MaxTxnKeys = 128

// TryAcquireAll implements [locks.MultiTryAcquirer]: one transaction
// tries every key of keys — distinct, non-empty and sorted — and writes
// them all or none. Each key is granted on the condition of
// [Locker.TryAcquire] (no key queues for its lock, waiters included), and
// its grant is TryAcquire's: a key of its own, named after a lease of its
// own. Its token is that key's create revision, the transaction's
// revision, larger than every earlier grant's of that key: every key of
// the set gets the same token, which is fine, a token being meaningful
// only with its own key. When a key is held it returns an error wrapping
// [locks.ErrNotObtained] that names it, and nothing is written.
//
// The leases come from the pool of idle leases; those it lacks are granted
// first, all at once. More than [MaxTxnKeys] keys, which etcd would refuse
// in one transaction, fail with an error wrapping [locks.ErrInvalidArgument]
// before anything is sent (package guard then takes the keys one by one).
func (l *Locker) TryAcquireAll(ctx context.Context, keys []string, ttl time.Duration) ([]locks.Lease, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no keys", locks.ErrInvalidArgument)
	}
	if len(keys) > MaxTxnKeys {
		return nil, fmt.Errorf("%w: %d keys, more than the %d of one transaction", locks.ErrInvalidArgument, len(keys), MaxTxnKeys)
	}
	for i, k := range keys {
		if err := locks.CheckArgs(k, ttl, MinTTL); err != nil {
			return nil, err
		}
		if i > 0 && keys[i-1] >= k {
			return nil, fmt.Errorf("%w: keys %q and %q are not sorted and distinct", locks.ErrInvalidArgument, keys[i-1], k)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Start over when a reused lease had lapsed, as acquire does.
	for attempt := 0; ; attempt++ {
		leases, err := l.tryAll(ctx, keys, ttl)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && attempt < 3+max(l.o.IdleLeases, 0) {
			continue
		}
		if err != nil {
			if errors.Is(err, locks.ErrNotObtained) || errors.Is(err, locks.ErrClosed) {
				return nil, err
			}
			if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
				err = fmt.Errorf("%w: %w", ctx.Err(), err)
			}
			return nil, fmt.Errorf("etcdlock: acquire %q: %w", strings.Join(keys, " "), err)
		}
		return leases, nil
	}
}

// tryAll is one attempt of TryAcquireAll.
func (l *Locker) tryAll(ctx context.Context, keys []string, ttl time.Duration) ([]locks.Lease, error) {
	n := len(keys)
	ids := make([]clientv3.LeaseID, n)
	refresh := make([]func() (time.Time, bool, error), n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() { ids[i], refresh[i], errs[i] = l.lease(ctx, ttl) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		// The leases obtained hold no key: keep them for reuse.
		for i := range keys {
			if errs[i] == nil {
				if d, doubt, err := refresh[i](); err == nil && !doubt {
					l.putBack(ids[i], ttl, d)
				}
			}
		}
		if errors.Is(err, locks.ErrClosed) {
			return nil, errClosed
		}
		return nil, err
	}
	grants := make([]*Lease, n)
	cmps := make([]clientv3.Cmp, n)
	puts := make([]clientv3.Op, n)
	counts := make([]clientv3.Op, n)
	for i, key := range keys {
		q := l.queue(key)
		// Named after its lease, as join names it: the lease serves this
		// grant alone until nothing of it can reach the server any more.
		grants[i] = &Lease{l: l, c: l.c, key: key, id: ids[i], ttl: ttl, myKey: fmt.Sprintf("%s%x", q, int64(ids[i])),
			lost: make(chan struct{}), watchReady: make(chan struct{})}
		cmps[i] = clientv3.Compare(clientv3.CreateRevision(q).WithPrefix(), "=", 0)
		puts[i] = clientv3.OpPut(grants[i].myKey, "", clientv3.WithLease(ids[i]))
		counts[i] = clientv3.OpGet(q, clientv3.WithPrefix(), clientv3.WithCountOnly())
	}
	resp, err := l.c.Txn(ctx).If(cmps...).Then(puts...).Else(counts...).Commit()
	var kerr error
	for i := range grants {
		d, doubt, err := refresh[i]()
		grants[i].deadline, grants[i].doubt = d, doubt
		errs[i] = err
		if err != nil && kerr == nil {
			kerr = err
		}
	}
	if err != nil {
		if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// Applied perhaps, its reply lost, or still on its way: revoke
			// every lease, as join does for one (a put on a revoked lease
			// fails, and revoking deletes what was put).
			for _, id := range ids {
				l.cleanup.Run(ctx, func(ctx context.Context) { _, _ = l.c.Revoke(ctx, id) })
			}
		}
		// Otherwise a reused lease had lapsed and nothing was written; the
		// others lapse at their TTL (put back, the lapsed one could be
		// taken again by the next attempt).
		return nil, err
	}
	if !resp.Succeeded {
		for i, g := range grants {
			if errs[i] == nil && !g.doubt {
				l.putBack(g.id, ttl, g.deadline)
			}
		}
		for i, r := range resp.Responses {
			if r.GetResponseRange().GetCount() > 0 {
				return nil, fmt.Errorf("etcdlock: try %q: %w", keys[i], locks.ErrNotObtained)
			}
		}
		return nil, fmt.Errorf("etcdlock: try %q: %w", strings.Join(keys, " "), locks.ErrNotObtained)
	}
	leases := make([]locks.Lease, n)
	for i, g := range grants {
		g.rev = resp.Header.Revision
		leases[i] = g
	}
	if kerr != nil {
		// The puts succeeded, so every lease was live when they were
		// applied; a keep-alive raced its expiry. Treat the set as lapsed.
		for _, g := range grants {
			g.abandon(ctx)
		}
		return nil, kerr
	}
	return leases, nil
}
