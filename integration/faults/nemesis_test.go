package faults

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fenceguard/fenceguard/harness"
)

// The nemeses. Each makes the victim, c1, lose its lock while it sits
// between its read and its write, without it noticing in time; the
// schedule (see run) then lets c2 take the lock over before c1 writes.
const (
	nemPause = "pause"     // c1's process frozen with SIGSTOP past its lease, then SIGCONT
	nemKill  = "kill"      // the lock server killed and restarted (per locker, see newNemesis)
	nemCut   = "partition" // c1's connections to the lock service cut, then restored
	nemDelay = "delay"     // the lock service's replies to c1 held back longer than the TTL
	nemClock = "clock"     // c1's clock stands still: it believes its lease lasts longer than the server does
)

// nemesis is one fault, as applied to one locker.
type nemesis struct {
	faults int // faults injected per run
	lane   int // where the timeline draws it: the victim's lane (0), or all lanes (-1) for a server
	label  string
	// takeover bounds how long the lock may take to pass to c2 once the
	// fault is in.
	takeover time.Duration
	// healAfterVictim: heal only after the victim's write (the clock:
	// until then it believes its lease is live).
	healAfterVictim bool

	prepare func(ctx context.Context, r *run) error // before the victim's critical section
	inject  func(ctx context.Context, r *run) error // the victim holds its lock and has read
	heal    func(ctx context.Context, r *run) error
	cleanup func() // after a failed run: undo whatever is left (idempotent)
}

func newNemesis(spec cellSpec, c *cell) *nemesis {
	noop := func(context.Context, *run) error { return nil }
	n := &nemesis{faults: 1, lane: 0, prepare: noop, inject: noop, heal: noop, cleanup: func() {}}
	n.takeover = 15 * time.Second
	if spec.locker == etcdLock || spec.locker == zkLock {
		n.takeover = 40 * time.Second // an election, or a session timeout, and a lease
	}
	svc := c.svc
	eachProxy := func(f func(*harness.Proxy) error) error {
		var errs []error
		for _, p := range svc.proxies {
			errs = append(errs, f(p))
		}
		return errors.Join(errs...)
	}
	restore := func(context.Context, *run) error { return eachProxy((*harness.Proxy).Restore) }

	switch spec.nemesis {
	case nemPause:
		n.label = "c1 FROZEN (SIGSTOP)"
		n.inject = func(ctx context.Context, r *run) error {
			p := c.procs[victim]
			if err := p.signal(sigStop); err != nil {
				return err
			}
			for deadline := time.Now().Add(5 * time.Second); !stopped(p.pid()); {
				if time.Now().After(deadline) {
					return fmt.Errorf("c1 (pid %d) did not stop", p.pid())
				}
				time.Sleep(time.Millisecond) // polling the kernel's view; there is no event to wait on
			}
			return nil
		}
		n.heal = func(context.Context, *run) error { return c.procs[victim].signal(sigCont) }
		n.cleanup = func() { c.procs[victim].signal(sigCont) }

	case nemClock:
		n.label = "c1's clock STANDS STILL: it renews nothing and believes its lease is live"
		n.healAfterVictim = true
		halted := false
		set := func(ctx context.Context, r *run, mode string) error {
			if err := c.send(ctx, victim, command{Kind: cmdClock, Clock: mode}); err != nil {
				return err
			}
			_, err := r.await(ctx, 10*time.Second, "c1's clock "+mode, func(e event) bool { return e.Client == victim && e.Kind == evClock })
			return err
		}
		n.inject = func(ctx context.Context, r *run) error {
			halted = true
			return set(ctx, r, "halt")
		}
		n.heal = func(ctx context.Context, r *run) error {
			halted = false
			return set(ctx, r, "run")
		}
		n.cleanup = func() {
			if halted {
				halted = false
				c.send(context.Background(), victim, command{Kind: cmdClock, Clock: "run"})
			}
		}

	case nemCut:
		n.label = "c1's connections to the lock service CUT"
		n.inject = func(context.Context, *run) error { return eachProxy((*harness.Proxy).Cut) }
		n.heal = restore
		n.cleanup = func() { restore(nil, nil) }

	case nemDelay:
		d := 3 * c.ttl
		n.label = fmt.Sprintf("the lock service's replies to c1 DELAYED %v", d)
		n.inject = func(context.Context, *run) error {
			return eachProxy(func(p *harness.Proxy) error { return p.Delay(d) })
		}
		n.heal = restore
		n.cleanup = func() { restore(nil, nil) }

	case nemKill:
		n.lane = -1
		startAll := func() {
			for _, s := range svc.dedicated {
				if !s.Running() {
					s.Start(spec.locker == redisLock || spec.locker == redLock)
				}
			}
		}
		n.cleanup = func() { restore(nil, nil); startAll() }
		killRestart := func(s *harness.Server, wipe bool) error {
			if err := s.Kill(); err != nil {
				return err
			}
			return s.Start(wipe)
		}
		switch spec.locker {
		case redisLock:
			// Redis without persistence: the restart loses every
			// lock and every token counter.
			n.label = "Redis KILLED, restarted empty"
			n.inject = func(context.Context, *run) error { return killRestart(svc.dedicated[0], true) }
		case redisClusterLock:
			clusterKillNemesis(n, c)
		case redLock:
			// Kleppmann's case against Redlock: c1 reaches only
			// nodes 1-3 and takes the lock on them; nodes 2 and 3
			// crash and come back empty; c2 takes nodes 2-5.
			n.faults = 3
			n.label = "Redlock nodes 2, 3 (of c1's 1-3) KILLED, restarted empty"
			n.prepare = func(context.Context, *run) error {
				return errors.Join(svc.proxies[3].Cut(), svc.proxies[4].Cut())
			}
			n.inject = func(context.Context, *run) error {
				return errors.Join(killRestart(svc.dedicated[1], true), killRestart(svc.dedicated[2], true))
			}
			n.heal = restore
		case etcdLock:
			// The leader of a three-member cluster, c1's only member,
			// dies: c1 cannot renew, the others carry on with a new
			// leader, which lets c1's lease expire.
			n.label = "etcd leader, c1's only member, KILLED"
			var killed *harness.Server
			pinned := ""
			n.prepare = func(ctx context.Context, r *run) error {
				lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				leader, err := svc.cluster.Leader(lctx)
				if err != nil {
					return err
				}
				killed = leader
				if pinned == leader.Addr() {
					return nil
				}
				lc := svc.direct
				lc.Addrs = []string{leader.Addr()}
				if err := c.send(ctx, victim, command{Kind: cmdLock, Lock: &lc}); err != nil {
					return err
				}
				if _, err := r.await(ctx, 30*time.Second, "c1 connected to the leader", func(e event) bool {
					return e.Client == victim && e.Kind == evLocked
				}); err != nil {
					return err
				}
				pinned = leader.Addr()
				return nil
			}
			n.inject = func(context.Context, *run) error { return killed.Kill() }
			n.heal = func(ctx context.Context, r *run) error {
				if err := killed.Start(false); err != nil {
					return err
				}
				lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				_, err := svc.cluster.Leader(lctx)
				return err
			}
		case zkLock:
			// A standalone ZooKeeper crashes and comes back with its
			// data: sessions survive if their clients reconnect in
			// time, zxids carry on in a new epoch.
			n.label = "ZooKeeper KILLED and restarted"
			n.inject = func(context.Context, *run) error { return killRestart(svc.dedicated[0], false) }
		}
	}
	ensembleNemesis(spec, c, n)
	return n
}
