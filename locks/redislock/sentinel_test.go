package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/lockstest"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/token"
)

// failoverClient is a go-redis Sentinel client of r's primary. Its reads
// outlast a fence's WAIT (ReplicaTimeout 1s).
func failoverClient(t testing.TB, r *redisserver.Sentinel) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    r.MasterName(),
		SentinelAddrs: r.SentinelAddrs(),
		MaxRetries:    -1,
		DialTimeout:   time.Second,
		ReadTimeout:   5 * time.Second,
		WriteTimeout:  time.Second,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// retry runs op until it succeeds or ctx ends: right after a failover the
// client still dials the dead primary until it hears of the switch.
func retry[T any](ctx context.Context, op func() (T, error)) (T, error) {
	for {
		v, err := op()
		if err == nil || errors.Is(err, locks.ErrNotHeld) || errors.Is(err, locks.ErrNotObtained) || errors.Is(err, token.ErrStale) || errors.Is(err, redislock.ErrNotReplicated) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, fmt.Errorf("%w (gave up: %v)", err, context.Cause(ctx))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// The conformance suite through a Sentinel client, the Sequencer's
// included: one Sentinel setup, a key prefix per subtest. (Unreachable is covered by TestConformance on
// a plain client; a Sentinel client reaches the address the sentinels
// give it, which no proxy of the test is in front of.)
func TestSentinelConformance(t *testing.T) {
	t.Parallel()
	r := redisserver.NewSentinel(t)
	n := 0
	prefixes := map[locks.Locker]string{}
	lockstest.Run(t, lockstest.Config{
		// The first call of a Sentinel client asks a sentinel, then dials:
		// leave the short leases room for it on a loaded machine.
		ShortTTL: time.Second,
		NewLocker: func(t *testing.T) locks.Locker {
			n++
			prefix := fmt.Sprintf("sc%d:", n)
			l := newLocker(t, failoverClient(t, r), redislock.Options{Prefix: prefix})
			prefixes[l] = prefix
			return l
		},
		// As a resource builds it: a Sentinel client of its own.
		NewSequencer: func(t *testing.T, l locks.Locker) token.Sequencer {
			return redislock.NewSequencer(failoverClient(t, r), prefixes[l])
		},
	})
}

// A failover while a lease is held, the lock replicated: the lease keeps
// working on the new primary (renewals succeed, nobody else gets the
// lock), and the next grant's token is above it.
func TestSentinelFailoverKeepsReplicatedLease(t *testing.T) {
	t.Parallel()
	r := redisserver.NewSentinel(t)
	ctx := ctxFor(t, 2*time.Minute)
	la := newLocker(t, failoverClient(t, r), redislock.Options{})
	lb := newLocker(t, failoverClient(t, r), redislock.Options{})
	held, err := la.Acquire(ctx, "k", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	for _, how := range []string{"SENTINEL FAILOVER", "primary killed"} {
		var err error
		if how == "SENTINEL FAILOVER" {
			_, err = r.Failover(ctx)
		} else {
			var killed *harness.Server
			killed, _, err = r.KillPrimary(ctx)
			if err == nil {
				defer killed.Start(false)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := retry(ctx, func() (struct{}, error) { return struct{}{}, held.Renew(ctx) }); err != nil {
			t.Fatalf("after %s: renewal of the replicated lease: %v", how, err)
		}
		if _, err := lb.TryAcquire(ctx, "k", time.Minute); !errors.Is(err, locks.ErrNotObtained) {
			t.Fatalf("after %s: another TryAcquire = %v, want ErrNotObtained", how, err)
		}
		if how == "SENTINEL FAILOVER" {
			if err := r.WaitSynced(ctx); err != nil { // the old primary is the replica now
				t.Fatal(err)
			}
		}
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := lb.Acquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() <= held.Token() {
		t.Fatalf("token after two failovers %d, not above %d", next.Token(), held.Token())
	}
}

// The lock write is not replicated when the primary dies (replication
// stalled): the promoted replica has no lock, and a second client is
// granted it while the first still believes it holds it — the double grant
// no Redis lock can prevent. The new grant's token is larger (clock
// floor), so a fence at the resource refuses the stale holder once the new
// one has written; the control, an unfenced store, takes both writes. The
// stale holder learns it lost at its next renewal.
func TestSentinelLostLockWriteFenced(t *testing.T) {
	t.Parallel()
	r := redisserver.NewSentinel(t)
	ctx := ctxFor(t, 2*time.Minute)
	la := newLocker(t, failoverClient(t, r), redislock.Options{})
	lb := newLocker(t, failoverClient(t, r), redislock.Options{})
	if err := r.StallReplication(ctx); err != nil {
		t.Fatal(err)
	}
	a, err := la.Acquire(ctx, "k", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.KillPrimary(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := retry(ctx, func() (locks.Lease, error) { return lb.TryAcquire(ctx, "k", 30*time.Second) })
	if err != nil {
		t.Fatalf("TryAcquire on the promoted replica, which never saw the lock: %v", err)
	}
	if time.Now().After(a.Deadline()) {
		t.Fatal("the first lease ran out: the test needs both to be live")
	}
	t.Logf("double grant: A holds token %d until %v, B was granted %d", a.Token(), time.Until(a.Deadline()).Round(time.Millisecond), b.Token())
	if b.Token() <= a.Token() {
		t.Fatalf("B's token %d is not above A's %d: the fence could not tell them apart", b.Token(), a.Token())
	}

	// Control: a store without a fence takes both writes, B's and then
	// the stale A's, which overwrites it.
	var store struct {
		value  string
		writes int
	}
	for _, w := range []struct {
		who   string
		lease locks.Lease
	}{{"B", b}, {"A", a}} {
		if time.Now().Before(w.lease.Deadline()) { // each believes it holds the lock
			store.value, store.writes = w.who, store.writes+1
		}
	}
	if store.writes != 2 || store.value != "A" {
		t.Fatalf("control: %d writes, value %q; want both, A's last", store.writes, store.value)
	}
	t.Logf("control (no fence): both holders' writes accepted, the stale A's last")

	// The fence: B writes first, then A's write is refused.
	f := &token.MemoryFence{}
	if err := f.Claim(ctx, "resource", b.Token()); err != nil {
		t.Fatalf("B's claim: %v", err)
	}
	err = f.Claim(ctx, "resource", a.Token())
	var se *token.StaleError
	if !errors.As(err, &se) || se.Current != b.Token() {
		t.Fatalf("A's claim after B's = %v, want a StaleError at %d", err, b.Token())
	}
	// A is told: its renewal finds B's grant.
	if err := a.Renew(ctx); !errors.Is(err, locks.ErrNotHeld) {
		t.Fatalf("A's renewal = %v, want ErrNotHeld", err)
	}
	if err := b.Renew(ctx); err != nil {
		t.Fatalf("B's renewal: %v", err)
	}
}

// A Fence with Replicas through a Sentinel client: a claim the stalled
// replica did not acknowledge is refused, so the failover that loses it
// loses no accepted claim. The control (Replicas 0) accepts it and the
// failover lets a lower token in after it.
func TestSentinelFenceReplicas(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, replicas int) (*history, error) {
		r := redisserver.NewSentinel(t)
		ctx := ctxFor(t, 2*time.Minute)
		f := redislock.NewFence(failoverClient(t, r), redislock.FenceOptions{Replicas: replicas, Logger: discard})
		var h history
		if err := h.claim(t, f, "before the failover", 5); err != nil {
			t.Fatal(err)
		}
		if err := r.WaitSynced(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.StallReplication(ctx); err != nil {
			t.Fatal(err)
		}
		err6 := h.claim(t, f, "with replication stalled", 6)
		killed, _, err := r.KillPrimary(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// The old primary comes back as the new one's replica (WAIT needs
		// one), without the claim of 6 it alone had.
		if err := killed.Start(false); err != nil {
			t.Fatal(err)
		}
		if err := r.WaitSynced(ctx); err != nil {
			t.Fatal(err)
		}
		// The new primary's replica has just synced; on a loaded machine
		// its acknowledgements can miss the WAIT's second for a while: an
		// equal token's claim is idempotent, so try it again until ctx
		// ends.
		var err5 error
		for {
			_, err5 = retry(ctx, func() (struct{}, error) { return struct{}{}, h.claim(t, f, "after the failover", 5) })
			if !errors.Is(err5, redislock.ErrNotReplicated) || ctx.Err() != nil {
				break
			}
		}
		if err5 != nil {
			t.Fatalf("Claim(5) after the failover: %v", err5)
		}
		return &h, err6
	}
	t.Run("Replicas=0", func(t *testing.T) {
		t.Parallel()
		h, err6 := run(t, 0)
		if err6 != nil {
			t.Fatalf("Claim(6), no replicas asked for: %v", err6)
		}
		if len(h.bad) == 0 {
			t.Fatal("the claim of 6 survived the failover: the control did not bite")
		}
		t.Logf("as documented, without Replicas: %s", h.bad[0])
	})
	t.Run("Replicas=1", func(t *testing.T) {
		t.Parallel()
		h, err6 := run(t, 1)
		if !errors.Is(err6, redislock.ErrNotReplicated) {
			t.Fatalf("Claim(6) with replication stalled = %v, want ErrNotReplicated", err6)
		}
		if len(h.bad) > 0 {
			t.Fatal(h.bad[0])
		}
	})
}
