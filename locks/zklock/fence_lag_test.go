package zklock_test

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/locks/zklock"
	"github.com/fenceguard/fenceguard/token"
)

// lagSpy is a follower's connection that counts the reads that answered
// with a mark other than the one the test knows is current.
type lagSpy struct {
	*zk.Conn
	want    atomic.Pointer[string] // the current mark; nil: count nothing
	stale   atomic.Int64
	refused atomic.Int64 // version checks the leader failed
}

func (c *lagSpy) Multi(ops ...any) ([]zk.MultiResponse, error) {
	res, err := c.Conn.Multi(ops...)
	if c.want.Load() != nil && (errors.Is(err, zk.ErrBadVersion) || len(res) == 1 && errors.Is(res[0].Error, zk.ErrBadVersion)) {
		c.refused.Add(1)
	}
	return res, err
}

func (c *lagSpy) Get(path string) ([]byte, *zk.Stat, error) {
	data, st, err := c.Conn.Get(path)
	if w := c.want.Load(); w != nil && err == nil && string(data) != *w {
		c.stale.Add(1)
	}
	return data, st, err
}

// Issue 15 §1: a session on a follower reads a mark its member has not
// caught up on. Claim 5 through a follower, claim 6 through the leader
// (acknowledged), claim 5 again through the follower: the last must be
// refused, however stale the follower's read. The rounds go on until the
// follower's read was seen stale often enough to prove the point (or the
// budget ends): the old Fence, which accepted an equal mark on the read
// alone, let every such round in.
func TestFenceFollowerLag(t *testing.T) {
	t.Parallel()
	e := zkserver.NewEnsemble(t, 3)
	ctx := ctxFor(t, 2*time.Minute)
	leader, followers, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	opts := zklock.FenceOptions{Prefix: "/fence", Check: token.NoCheck(), Logger: discardLog}
	onLeader := zklock.NewFence(connectOne(t, leader.Addr(), 10*time.Second), opts)
	var spies []*lagSpy
	var onFollower []*zklock.Fence
	for _, f := range followers {
		spy := &lagSpy{Conn: connectOne(t, f.Addr(), 10*time.Second)}
		spies = append(spies, spy)
		onFollower = append(onFollower, zklock.NewFence(spy, opts))
	}

	const (
		minRounds = 200
		maxRounds = 5000
		wantStale = 5 // stale reads to see before stopping
		budget    = 15 * time.Second
	)
	six := "6"
	start := time.Now()
	rounds, accepted, firstAccepted := 0, 0, 0
	var staleRounds int
	for rounds < maxRounds && (rounds < minRounds || staleRounds < wantStale) && time.Since(start) < budget {
		i := rounds % len(onFollower)
		r := fmt.Sprint("r", rounds)
		rounds++
		if err := onFollower[i].Claim(ctx, r, 5); err != nil {
			t.Fatalf("round %d: claim 5 through %s: %v", rounds, followers[i].Name(), err)
		}
		if err := onLeader.Claim(ctx, r, 6); err != nil {
			t.Fatalf("round %d: claim 6 through the leader: %v", rounds, err)
		}
		before := spies[i].stale.Load()
		spies[i].want.Store(&six)
		err := onFollower[i].Claim(ctx, r, 5)
		spies[i].want.Store(nil)
		if spies[i].stale.Load() > before {
			staleRounds++
		}
		var se *token.StaleError
		switch {
		case err == nil:
			accepted++
			if firstAccepted == 0 {
				firstAccepted = rounds
			}
		case errors.As(err, &se):
			if se.Current != 6 {
				t.Fatalf("round %d: StaleError %+v, want current 6", rounds, se)
			}
		default:
			t.Fatalf("round %d: claim 5 again through %s: %v", rounds, followers[i].Name(), err)
		}
	}
	var refused int64
	for _, s := range spies {
		refused += s.refused.Load()
	}
	t.Logf("%d rounds in %v: the follower's read was stale in %d, the leader's version check failed %d times, the stale claim accepted in %d",
		rounds, time.Since(start).Round(time.Millisecond), staleRounds, refused, accepted)
	if accepted > 0 {
		t.Errorf("the stale token 5 was accepted after 6 in %d of %d rounds (first in round %d)", accepted, rounds, firstAccepted)
	}
	if staleRounds == 0 {
		t.Logf("no stale read in %d rounds: the followers never lagged, so this run proves little", rounds)
	}

	// Reset through a lagging follower is exact too: it replaces the mark
	// the leader holds, not the one the follower read.
	const resetRounds = 60
	staleRounds = 0
	for round := range resetRounds {
		i := round % len(onFollower)
		r := fmt.Sprint("reset", round)
		if err := onFollower[i].Claim(ctx, r, 5); err != nil {
			t.Fatal(err)
		}
		if err := onLeader.Claim(ctx, r, 6); err != nil {
			t.Fatal(err)
		}
		before := spies[i].stale.Load()
		spies[i].want.Store(&six)
		prev, err := onFollower[i].Reset(ctx, r, 3)
		spies[i].want.Store(nil)
		if spies[i].stale.Load() > before {
			staleRounds++
		}
		if err != nil || prev != 6 {
			t.Fatalf("reset round %d: Reset(3) through %s = %d, %v; want it to replace 6", round, followers[i].Name(), prev, err)
		}
		if hw, err := onLeader.HighWater(ctx, r); err != nil || hw != 3 {
			t.Fatalf("reset round %d: the leader's mark %d, %v after the reset to 3", round, hw, err)
		}
	}
	t.Logf("%d resets through a follower: its read was stale in %d, every one replaced the leader's mark", resetRounds, staleRounds)
}

var discardLog = slog.New(slog.DiscardHandler)

// connectOne opens a go-zookeeper connection to the one server at addr and
// waits until it has a session. go-zookeeper connects to a random server
// of its list and moves to another when a connection breaks; with this
// one-element list the session stays on that member, reconnects included,
// so the test knows which member serves its reads. The connection is
// closed when the test ends.
func connectOne(t testing.TB, addr string, sessionTimeout time.Duration) *zk.Conn {
	t.Helper()
	c, events, err := zk.Connect([]string{addr}, sessionTimeout, zk.WithLogger(quiet{}), zk.WithLogInfo(false))
	if err != nil {
		t.Fatalf("connecting to ZooKeeper at %s: %v", addr, err)
	}
	t.Cleanup(func() {
		c.Close()
		for range events { // until go-zookeeper's goroutines are done
		}
	})
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	for c.State() != zk.StateHasSession {
		select {
		case <-events:
		case <-timeout.C:
			t.Fatalf("no ZooKeeper session with %s after a minute", addr)
		}
	}
	return c
}
