package redislock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/lockstest"
	"github.com/fenceguard/fenceguard/locks/redislock"
)

// keysPerMaster returns, for each master, a lock name whose slot it owns.
func keysPerMaster(t *testing.T, ctx context.Context, c *redisserver.Cluster, prefix string) (map[*harness.Server]string, []*harness.Server) {
	t.Helper()
	masters, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := map[*harness.Server]string{}
	for i := 0; len(names) < len(masters) && i < 1000; i++ {
		name := "n" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26))
		m, err := c.MasterForKey(ctx, prefix+"{"+name+"}")
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := names[m]; !ok {
			names[m] = name
		}
	}
	if len(names) < len(masters) {
		t.Fatalf("no key found for every master")
	}
	return names, masters
}

func numSub(t *testing.T, ctx context.Context, s *harness.Server, channel string) int64 {
	t.Helper()
	nc := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer nc.Close()
	n, err := nc.PubSubNumSub(ctx, channel).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n[channel]
}

// A waiter on a Cluster subscribes on the master of its lock's slot, the
// node whose release script publishes the hand-over: there the message is
// delivered at once, where on another node it comes over the cluster bus
// (under many contended keys, hundreds of ms later). Waiters on locks of
// three masters: each master has its lock's subscriber, and each waiter
// is handed its lock within the conformance suite's wake bound. The
// control, the locker with one subscriber on whichever node (as before),
// leaves two masters without theirs.
func TestClusterWaitersListenOnTheirMaster(t *testing.T) {
	t.Parallel()
	c := redisserver.NewCluster(t, 3, 0)
	ctx := ctxFor(t, time.Minute)
	for _, control := range []bool{false, true} {
		prefix := clusterPrefix()
		names, masters := keysPerMaster(t, ctx, c, prefix)
		cc := newClusterClient(t, c, nil)
		l := newLocker(t, cc, redislock.Options{Prefix: prefix})
		if control {
			redislock.OneSubscriber(l)
		}
		holders := map[*harness.Server]locks.Lease{}
		got := map[*harness.Server]chan time.Time{}
		for _, m := range masters {
			h, err := l.TryAcquire(ctx, names[m], 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			holders[m] = h
			ch := make(chan time.Time, 1)
			got[m] = ch
			go func() {
				w, err := l.Acquire(ctx, names[m], 30*time.Second)
				if err != nil {
					t.Error(err)
					ch <- time.Time{}
					return
				}
				ch <- time.Now()
				_ = w.Release(ctx)
			}()
		}
		missing := 0
		for _, m := range masters {
			channel := prefix + "{" + names[m] + "}:wake"
			var n int64
			// Waiting longer for what should come than for what the
			// control should lack.
			wait := 10 * time.Second
			if control {
				wait = 2 * time.Second
			}
			for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if n = numSub(t, ctx, m, channel); n > 0 {
					break
				}
			}
			if n == 0 {
				missing++
			}
			for _, o := range masters {
				if o != m && numSub(t, ctx, o, channel) != 0 && !control {
					t.Errorf("%s's channel subscribed on %s too", m.Name(), o.Name())
				}
			}
		}
		lat := harness.StartLateness(t)
		for _, m := range masters {
			released := time.Now()
			if err := holders[m].Release(ctx); err != nil {
				t.Fatal(err)
			}
			if at := <-got[m]; !at.IsZero() && at.Sub(released) > lat.Allowance(lockstest.WakeBound, released) {
				t.Errorf("control %v: the waiter on %s's lock took %v after the release", control, m.Name(), at.Sub(released))
			}
		}
		t.Logf("control %v: %d of %d masters without their lock's subscriber", control, missing, len(masters))
		switch {
		case !control && missing > 0:
			t.Errorf("%d masters without the subscriber of their lock's waiter", missing)
		case control && missing < len(masters)-1:
			t.Errorf("control: one subscriber, yet only %d masters without theirs", missing)
		}
	}
}

// A master's subscriber closes once it has had no waiter for the linger
// (a master that failed over keeps no reader redialling it), and a later
// waiter opens one again.
func TestClusterIdleSubscribersClose(t *testing.T) {
	// Not parallel: the linger is every Locker's.
	defer redislock.SetNotifierLinger(200 * time.Millisecond)()
	c := redisserver.NewCluster(t, 3, 0)
	ctx := ctxFor(t, time.Minute)
	prefix := clusterPrefix()
	names, masters := keysPerMaster(t, ctx, c, prefix)
	l := newLocker(t, newClusterClient(t, c, nil), redislock.Options{Prefix: prefix})
	m := masters[0]
	pubsubClients := func() int {
		nc := redis.NewClient(&redis.Options{Addr: m.Addr()})
		defer nc.Close()
		s, err := nc.Do(ctx, "CLIENT", "LIST", "TYPE", "pubsub").Text()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(s, "id=")
	}
	for round := range 2 {
		h, err := l.TryAcquire(ctx, names[m], 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			w, err := l.Acquire(ctx, names[m], 30*time.Second)
			if err == nil {
				err = w.Release(ctx)
			}
			done <- err
		}()
		for deadline := time.Now().Add(2 * time.Second); pubsubClients() == 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no subscriber on %s while a waiter waits", round, m.Name())
			}
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(3 * time.Second); pubsubClients() > 0; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the idle subscriber on %s still open 3s after the last waiter left", round, m.Name())
			}
		}
	}
}
