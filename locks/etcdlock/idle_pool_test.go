package etcdlock_test

import (
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
)

// A grant on a lease reused from the idle pool gets a Deadline that counts
// its own TTL, not the TTL of the grant that used the lease before: grants
// whose TTLs round up to the same whole-second etcd lease share the pool.
func TestReusedLeaseDeadlineCountsItsOwnTTL(t *testing.T) {
	for _, tc := range []struct {
		name        string
		delay       time.Duration
		first, next time.Duration
	}{
		{"no delay", 0, 2 * time.Second, 1100 * time.Millisecond},
		{"lock-delay", 500 * time.Millisecond, 2500 * time.Millisecond, 2100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := etcdserver.Shared(t)
			l, err := etcdlock.New(newClient(t, d.Endpoints), etcdlock.Options{Prefix: d.Prefix, IdleLeases: 1, LockDelay: tc.delay})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			ctx := ctxFor(t, 10*time.Second)
			first, err := l.Acquire(ctx, "k", tc.first)
			if err != nil {
				t.Fatal(err)
			}
			if err := first.Release(ctx); err != nil {
				t.Fatal(err)
			}
			next, err := l.Acquire(ctx, "k", tc.next)
			got := time.Now()
			if err != nil {
				t.Fatal(err)
			}
			defer next.Release(ctx)
			if next.(*etcdlock.Lease).LeaseID() != first.(*etcdlock.Lease).LeaseID() {
				t.Fatal("the lease was not reused")
			}
			if d := next.Deadline(); d.After(got.Add(tc.next)) {
				t.Fatalf("Deadline %v after the acquire returned, past its TTL %v", d.Sub(got), tc.next)
			}
		})
	}
}
