package etcdlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
)

// A grant on a lease reused from the idle pool gets a Deadline that counts
// its own TTL, not the TTL of the grant that used the lease before: grants
// whose TTLs round up to the same whole-second etcd lease share the pool.
func TestReusedLeaseDeadlineCountsItsOwnTTL(t *testing.T) {
	t.Parallel()
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

// unansweredKeepAlive passes keep-alives on until stall is set; from then
// on each one is seen (on sent), gets no answer until answer is closed or
// its context ends, and fails, as when the request went out and the
// connection broke before the reply: it may still be applied later.
type unansweredKeepAlive struct {
	*clientv3.Client
	stall  atomic.Bool
	sent   chan clientv3.LeaseID
	answer chan struct{}
}

func (k *unansweredKeepAlive) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	if !k.stall.Load() {
		return k.Client.KeepAliveOnce(ctx, id)
	}
	select {
	case k.sent <- id:
	default:
	}
	select {
	case <-k.answer:
	case <-ctx.Done():
	}
	return nil, errors.New("connection lost before the answer")
}

// An idle lease whose background refresh is on its way, or failed without
// an answer, serves no grant: that keep-alive may reach the server later
// and extend the grant's lease, keeping a crashed holder's lock up to a TTL
// past its last renewal.
func TestIdleLeaseRefreshedWithoutAnswerServesNoGrant(t *testing.T) {
	t.Parallel()
	for _, inFlight := range []bool{false, true} {
		name := "failed"
		if inFlight {
			name = "in flight"
		}
		t.Run(name, func(t *testing.T) {
			d := etcdserver.Shared(t)
			kc := &unansweredKeepAlive{Client: newClient(t, d.Endpoints), sent: make(chan clientv3.LeaseID, 1), answer: make(chan struct{})}
			if !inFlight {
				close(kc.answer)
			} else {
				defer close(kc.answer)
			}
			l, err := etcdlock.New(kc, etcdlock.Options{Prefix: d.Prefix, IdleLeases: 1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			ctx := ctxFor(t, 20*time.Second)
			const ttl = 9 * time.Second
			first, err := l.Acquire(ctx, "k", ttl)
			if err != nil {
				t.Fatal(err)
			}
			kc.stall.Store(true)
			if err := first.Release(ctx); err != nil { // fresh: pooled as it is
				t.Fatal(err)
			}
			// The background refresh comes at three quarters of the TTL
			// left; the lease stays fresh enough to reuse as it is, with no
			// keep-alive, until two thirds are left.
			select {
			case <-kc.sent:
			case <-time.After(ttl / 2):
				t.Fatal("no background refresh")
			}
			if !inFlight {
				time.Sleep(20 * time.Millisecond) // let the failure be seen
			}
			next, err := l.Acquire(ctx, "k", ttl)
			if err != nil {
				t.Fatal(err)
			}
			defer next.Release(ctx)
			if left := time.Until(first.Deadline()); left < 2*ttl/3+200*time.Millisecond {
				t.Skipf("too slow to check: %v of the first grant's TTL left", left)
			}
			if next.(*etcdlock.Lease).LeaseID() == first.(*etcdlock.Lease).LeaseID() {
				t.Fatal("the grant took the lease whose refresh went unanswered")
			}
		})
	}
}
