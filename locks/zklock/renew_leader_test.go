package zklock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/zklock"
)

// A holder's member loses the leader while its clients stay connected: the
// leader and the other follower are paused (SIGSTOP), so the member, which
// notices the leader gone only after syncLimit (5 s here), goes on answering
// reads from its frozen copy. The pause outlasts the holder's session
// timeout (1.5 s) but not syncLimit: once resumed, the leader, which heard
// nothing of the session meanwhile, expires it at once and grants the lock
// to a waiter connected to it. No renewal may succeed on the member's copy
// with a Deadline past that grant (locks.Lease: the server's own expiry is
// no earlier than the Deadline), and the lease must be lost before it
// (docs/design.md, "zklock").
//
// The control runs the same with Renew an Exists alone (as it was): the
// member answers it, renewals go on succeeding through the pause, and the
// last Deadline lies past the other's grant. A control that shows no such
// renewal proves nothing and fails the test.
func TestEnsembleRenewNeedsLeader(t *testing.T) {
	// Not parallel: the control switches the sync off for the whole package.
	e := zkserver.NewEnsemble(t, 3)
	for _, control := range []bool{false, true} {
		name := "sync"
		if control {
			name = "control-exists-only"
		}
		t.Run(name, func(t *testing.T) {
			if control {
				defer zklock.RenewSkipsSync(true)()
			}
			runRenewNeedsLeader(t, e, control)
		})
	}
}

func runRenewNeedsLeader(t *testing.T, e *zkserver.Ensemble, control bool) {
	ctx := ctxFor(t, time.Minute)
	leader, followers, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, other := followers[0], followers[1]
	prefix := fmt.Sprintf("/renewleader-%v/locks", control)
	const ttl = 1500 * time.Millisecond
	la := newLocker(t, []string{f.Addr()}, prefix)      // A: the member that loses the leader
	lb := newLocker(t, []string{leader.Addr()}, prefix) // B: the leader
	a, err := la.Acquire(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(context.Background())
	lostAt := make(chan time.Time, 1)
	go func() {
		select {
		case <-a.(locks.LossNotifier).Lost():
			lostAt <- time.Now()
		case <-ctx.Done():
			lostAt <- time.Time{}
		}
	}()
	type grant struct {
		le  locks.Lease
		at  time.Time
		err error
	}
	bc := make(chan grant, 1)
	go func() {
		// A long session: B's own pings go unanswered during the pause.
		le, err := lb.Acquire(ctx, "k", 8*time.Second)
		bc <- grant{le, time.Now(), err}
	}()
	c := inspect(t, []string{leader.Addr()})
	eventually(t, 20*time.Second, "B queued", func() bool { return len(children(t, c, prefix, "k")) == 2 })

	type renewal struct{ at, deadline time.Time }
	renewals := make(chan []renewal, 1)
	stop := make(chan struct{})
	go func() {
		var out []renewal
		defer func() { renewals <- out }()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			err := a.Renew(rctx)
			cancel()
			if errors.Is(err, locks.ErrNotHeld) {
				return
			}
			if err == nil {
				out = append(out, renewal{time.Now(), a.Deadline()})
			}
		}
	}()
	time.Sleep(500 * time.Millisecond) // a few renewals with the leader there

	resume := func() {
		for _, s := range []*harness.Server{other, leader} {
			if err := s.Resume(); err != nil {
				t.Errorf("resuming %s: %v", s.Addr(), err)
			}
		}
	}
	paused := time.Now()
	for _, s := range []*harness.Server{other, leader} {
		if err := s.Pause(); err != nil {
			resume()
			t.Fatal(err)
		}
	}
	time.Sleep(3 * time.Second)
	resume()
	resumed := time.Now()

	var b grant
	select {
	case b = <-bc:
	case <-time.After(20 * time.Second):
		close(stop)
		<-renewals
		t.Fatal("B was not granted within 20s of the resume")
	}
	if b.err != nil {
		close(stop)
		<-renewals
		t.Fatalf("B's acquire: %v", b.err)
	}
	defer b.le.Release(context.Background())
	var aLost time.Time
	select {
	case aLost = <-lostAt:
	case <-time.After(2 * time.Second):
	}
	close(stop)
	rs := <-renewals

	var during, past int
	var last renewal
	for _, r := range rs {
		if r.at.After(paused) {
			during++
		}
		if r.deadline.After(b.at) {
			past++
		}
		last = r
	}
	rel := func(x time.Time) string {
		if x.IsZero() {
			return "never"
		}
		return x.Sub(paused).Round(time.Millisecond).String()
	}
	t.Logf("pause at 0, resumed at %v; B granted (token %d, A's %d) at %v; A lost by %v",
		rel(resumed), b.le.Token(), a.Token(), rel(b.at), rel(aLost))
	t.Logf("A's renewals: %d succeeded, %d after the pause began, %d with a Deadline past B's grant; the last at %v, Deadline %v",
		len(rs), during, past, rel(last.at), rel(last.deadline))
	if control {
		if past == 0 {
			t.Errorf("control: no Exists-only renewal had a Deadline past B's grant: the member's stale copy was not read this run, so the test proves nothing")
		}
		return
	}
	if past > 0 {
		t.Errorf("%d renewals had a Deadline past B's grant, the last %v past it: the server expired the session before the Deadline",
			past, last.deadline.Sub(b.at).Round(time.Millisecond))
	}
	if aLost.IsZero() || aLost.After(b.at) {
		t.Errorf("A's lease was not reported lost before B was granted the lock (lost at %v, B granted at %v)", rel(aLost), rel(b.at))
	}
	if err := a.Renew(ctx); !errors.Is(err, locks.ErrNotHeld) {
		t.Errorf("A's Renew after B's grant = %v, want ErrNotHeld", err)
	}
}
