package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
)

// identityClient returns a quiet client of db's cluster, closed when the
// test ends.
func identityClient(t *testing.T, db *etcdserver.DB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: db.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// identityLocker returns a Locker on cli under prefix, closed when the
// test ends.
func identityLocker(t *testing.T, cli etcdlock.Client, prefix string) *etcdlock.Locker {
	t.Helper()
	l, err := etcdlock.New(cli, etcdlock.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// asEtcd returns the etcdlock Lease behind a locks.Lease.
func asEtcd(t *testing.T, l locks.Lease) *etcdlock.Lease {
	t.Helper()
	el, ok := locks.LeaseAs[*etcdlock.Lease](l)
	if !ok {
		t.Fatalf("%T is no *etcdlock.Lease", l)
	}
	return el
}

// heldBy fails the test unless g's key is in etcd with g's token and its
// IsOwner comparison holds.
func heldBy(t *testing.T, ctx context.Context, cli *clientv3.Client, g locks.Lease) {
	t.Helper()
	el := asEtcd(t, g)
	resp, err := cli.Txn(ctx).If(el.IsOwner()).Commit()
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Succeeded {
		t.Errorf("grant with token %d (key %s) no longer holds the lock", g.Token(), el.OwnKey())
	}
}

// keysUnder returns the keys etcd holds under prefix.
func keysUnder(t *testing.T, ctx context.Context, cli *clientv3.Client, prefix string) []string {
	t.Helper()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys
}

// The same Locker grants a key twice in a row on the same lease, so both
// grants have the same key name. A replayed Release or Renew of the first
// grant must leave the second alone.
func TestReplayedCallsOfEarlierGrantOnSameLeaseSpareNewerGrant(t *testing.T) {
	t.Parallel()
	db := etcdserver.Shared(t)
	cli := identityClient(t, db)
	l := identityLocker(t, cli, db.Prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	for _, try := range []bool{false, true} {
		acquire := l.Acquire
		if try {
			acquire = l.TryAcquire
		}
		g1, err := acquire(ctx, "same-lease", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := g1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		g2, err := acquire(ctx, "same-lease", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		e1, e2 := asEtcd(t, g1), asEtcd(t, g2)
		if e1.LeaseID() != e2.LeaseID() || e1.OwnKey() != e2.OwnKey() {
			t.Fatalf("second grant on lease %x key %s, want the first's lease %x key %s reused",
				int64(e2.LeaseID()), e2.OwnKey(), int64(e1.LeaseID()), e1.OwnKey())
		}
		if g2.Token() <= g1.Token() {
			t.Errorf("second grant's token %d, want above the first's %d", g2.Token(), g1.Token())
		}
		for i := 0; i < 3; i++ {
			if err := g1.Release(ctx); err != nil {
				t.Errorf("replayed Release of a released grant: %v, want nil", err)
			}
			if err := g1.Renew(ctx); !errors.Is(err, locks.ErrNotHeld) {
				t.Errorf("Renew of a released grant: %v, want ErrNotHeld", err)
			}
		}
		heldBy(t, ctx, cli, g2)
		if _, err := l.TryAcquire(ctx, "same-lease", 5*time.Second); !errors.Is(err, locks.ErrNotObtained) {
			t.Errorf("TryAcquire while the second grant holds: %v, want ErrNotObtained", err)
		}
		if err := g2.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := g2.Release(ctx); err != nil {
			t.Errorf("second Release: %v, want nil", err)
		}
	}
	if keys := keysUnder(t, ctx, cli, db.Prefix); len(keys) != 0 {
		t.Errorf("keys left under the prefix: %v", keys)
	}
}

// A grant whose key is deleted by hand, or whose lease is revoked, is no
// longer held: Renew and Release say ErrNotHeld (Release changing
// nothing, also on retries), Lost closes, and the next acquires of the
// key, on the same Locker, are granted at once with larger tokens.
func TestGrantRemovedBehindItsBackIsNotHeld(t *testing.T) {
	t.Parallel()
	db := etcdserver.Shared(t)
	cli := identityClient(t, db)
	l := identityLocker(t, cli, db.Prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	remove := map[string]func(el *etcdlock.Lease) error{
		"key deleted": func(el *etcdlock.Lease) error {
			_, err := cli.Delete(ctx, el.OwnKey())
			return err
		},
		"lease revoked": func(el *etcdlock.Lease) error {
			_, err := cli.Revoke(ctx, el.LeaseID())
			return err
		},
	}
	for name, rm := range remove {
		t.Run(name, func(t *testing.T) {
			g1, err := l.Acquire(ctx, "removed", 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			e1 := asEtcd(t, g1)
			lost := e1.Lost()
			if err := rm(e1); err != nil {
				t.Fatal(err)
			}
			select {
			case <-lost:
			case <-time.After(3 * time.Second):
				t.Fatal("Lost not closed within 3s of the removal")
			}
			start := time.Now()
			g2, err := l.Acquire(ctx, "removed", 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > 2*time.Second { // far below the TTL a stale key would last
				t.Errorf("next acquire took %v after the removal", d)
			}
			if g2.Token() <= g1.Token() {
				t.Errorf("next grant's token %d, want above %d", g2.Token(), g1.Token())
			}
			for i := 0; i < 2; i++ {
				if err := g1.Renew(ctx); !errors.Is(err, locks.ErrNotHeld) {
					t.Errorf("Renew of the removed grant: %v, want ErrNotHeld", err)
				}
				if err := g1.Release(ctx); !errors.Is(err, locks.ErrNotHeld) {
					t.Errorf("Release of the removed grant: %v, want ErrNotHeld", err)
				}
			}
			heldBy(t, ctx, cli, g2)
			if err := g2.Release(ctx); err != nil {
				t.Fatal(err)
			}
			// Later grants, on whatever lease the pool hands out, are
			// unaffected by the removed grant's lease.
			for i := 0; i < 3; i++ {
				g, err := l.TryAcquire(ctx, "removed", 5*time.Second)
				if err != nil {
					t.Fatalf("acquire %d after the removal: %v", i, err)
				}
				if err := g.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	if keys := keysUnder(t, ctx, cli, db.Prefix); len(keys) != 0 {
		t.Errorf("keys left under the prefix: %v", keys)
	}
}

// Many goroutines share one Locker (and two Lockers share one client),
// acquiring one key in turn, while every released grant is released and
// renewed again from other goroutines, racing the next grants, on leases
// the pool hands from grant to grant. Every grant holds the lock alone
// for its whole critical section, the tokens of successive grants grow,
// and nothing is left under the prefix at the end.
func TestConcurrentGrantsOnSharedLeasesStayExclusive(t *testing.T) {
	t.Parallel()
	db := etcdserver.Shared(t)
	cli := identityClient(t, db)
	lockers := []*etcdlock.Locker{identityLocker(t, cli, db.Prefix), identityLocker(t, cli, db.Prefix)}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	const workers, rounds = 6, 25
	var (
		inside  atomic.Int32
		mu      sync.Mutex
		tokens  []uint64
		leases  = map[clientv3.LeaseID]int{}
		replays sync.WaitGroup
	)
	errs := make(chan error, workers*rounds*4)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		l := lockers[w%len(lockers)]
		wg.Go(func() {
			for r := 0; r < rounds; r++ {
				g, err := l.Acquire(ctx, "shared", 5*time.Second)
				if err != nil {
					errs <- fmt.Errorf("acquire: %w", err)
					return
				}
				if n := inside.Add(1); n != 1 {
					errs <- fmt.Errorf("%d holders at once", n)
				}
				el, _ := locks.LeaseAs[*etcdlock.Lease](g)
				if g.Token() == 0 {
					errs <- errors.New("token 0")
				}
				mu.Lock()
				if len(tokens) > 0 && uint64(g.Token()) <= tokens[len(tokens)-1] {
					errs <- fmt.Errorf("token %d after %d", g.Token(), tokens[len(tokens)-1])
				}
				tokens = append(tokens, uint64(g.Token()))
				leases[el.LeaseID()]++
				mu.Unlock()
				// The grant holds the lock in etcd throughout.
				for i := 0; i < 2; i++ {
					resp, err := cli.Txn(ctx).If(el.IsOwner()).Commit()
					if err != nil {
						errs <- err
					} else if !resp.Succeeded {
						errs <- fmt.Errorf("grant %d lost its key while held", g.Token())
					}
				}
				inside.Add(-1)
				if err := g.Release(ctx); err != nil {
					errs <- fmt.Errorf("release %d: %w", g.Token(), err)
				}
				// Replays race the next grants, which may be on the same
				// lease and so have the same key name.
				replays.Go(func() {
					if err := g.Release(ctx); err != nil {
						errs <- fmt.Errorf("replayed release %d: %w", g.Token(), err)
					}
					if err := g.Renew(ctx); !errors.Is(err, locks.ErrNotHeld) {
						errs <- fmt.Errorf("renew of released %d: %v", g.Token(), err)
					}
				})
			}
		})
	}
	wg.Wait()
	replays.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	reused := 0
	for _, n := range leases {
		if n > 1 {
			reused += n - 1
		}
	}
	t.Logf("%d grants on %d leases (%d on a reused lease)", len(tokens), len(leases), reused)
	if reused == 0 {
		t.Error("no grant reused a lease: the case under test did not arise")
	}
	if keys := keysUnder(t, ctx, cli, db.Prefix); len(keys) != 0 {
		t.Errorf("keys left under the prefix: %v", keys)
	}
}

// Releases cut short at random points — before the delete is sent, while
// it is on its way, after it was applied but before its reply came back —
// and then retried until they return, followed at once by the next grant
// of the key on the same Locker (often on the same lease, so under the
// same key name). The cut-short delete must never remove that newer grant.
func TestReleasesCutShortAndRetriedSpareNextGrant(t *testing.T) {
	t.Parallel()
	db := etcdserver.Shared(t)
	cli := identityClient(t, db)
	l := identityLocker(t, cli, db.Prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const ttl = 10 * time.Second
	var cut, notHeld, sameLease, rounds int
	g, err := l.Acquire(ctx, "retried", ttl)
	if err != nil {
		t.Fatal(err)
	}
	stop := time.Now().Add(6 * time.Second)
	for time.Now().Before(stop) {
		rounds++
		rctx, rcancel := context.WithCancel(ctx)
		timer := time.AfterFunc(time.Duration(rand.IntN(3000))*time.Microsecond, rcancel)
		err := g.Release(rctx)
		timer.Stop()
		rcancel()
		if err != nil {
			cut++
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("release cut short: %v", err)
			}
			err = g.Release(ctx)
			if errors.Is(err, locks.ErrNotHeld) {
				notHeld++ // the cut-short delete was applied
			} else if err != nil {
				t.Fatalf("retried release: %v", err)
			}
		}
		next, err := l.Acquire(ctx, "retried", ttl)
		if err != nil {
			t.Fatalf("round %d: %v", rounds, err)
		}
		if asEtcd(t, next).LeaseID() == asEtcd(t, g).LeaseID() {
			sameLease++
		}
		heldBy(t, ctx, cli, next)
		if t.Failed() {
			t.Fatalf("round %d: the grant after a release cut short and retried lost its key", rounds)
		}
		g = next
	}
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d rounds: %d releases cut short (%d found applied on retry), %d next grants on the same lease", rounds, cut, notHeld, sameLease)
	if cut < 20 || sameLease < 20 {
		t.Errorf("too few releases cut short (%d) or grants reusing a lease (%d): the case under test hardly arose", cut, sameLease)
	}
	if keys := keysUnder(t, ctx, cli, db.Prefix); len(keys) != 0 {
		t.Errorf("keys left under the prefix: %v", keys)
	}
}

// Leases the Locker keeps for reuse, revoked by someone else: the next
// acquires find them gone and are granted on fresh leases, at once, with
// nothing left of the revoked ones.
func TestPooledLeasesRevokedElsewhereAreReplaced(t *testing.T) {
	t.Parallel()
	db := etcdserver.Shared(t)
	cli := identityClient(t, db)
	l := identityLocker(t, cli, db.Prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	const n = 4
	revoked := map[clientv3.LeaseID]bool{}
	var grants []locks.Lease
	for i := 0; i < n; i++ {
		g, err := l.Acquire(ctx, fmt.Sprintf("pooled-%d", i), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		grants = append(grants, g)
	}
	for _, g := range grants {
		if err := g.Release(ctx); err != nil {
			t.Fatal(err)
		}
		id := asEtcd(t, g).LeaseID()
		revoked[id] = true
		if _, err := cli.Revoke(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2*n; i++ {
		start := time.Now()
		g, err := l.Acquire(ctx, "pooled", 5*time.Second)
		if err != nil {
			t.Fatalf("acquire %d with the pooled leases revoked: %v", i, err)
		}
		if d := time.Since(start); d > 2*time.Second { // far below the TTL
			t.Errorf("acquire %d took %v", i, d)
		}
		if id := asEtcd(t, g).LeaseID(); revoked[id] {
			t.Errorf("grant %d on revoked lease %x", i, int64(id))
		}
		heldBy(t, ctx, cli, g)
		if err := g.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if keys := keysUnder(t, ctx, cli, db.Prefix); len(keys) != 0 {
		t.Errorf("keys left under the prefix: %v", keys)
	}
}
