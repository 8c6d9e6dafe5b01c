package faults

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/locks/zklock"
)

// The replicated lockers' cells: redislock through a Sentinel client
// (a primary, a replica, three sentinels) and zklock on a three-member
// ensemble. They hook into the shared code at one line each: the matrix
// and ttls (init below), newLockService, newNemesis, openLocker, runCell.
const (
	redisSentinelLock = "redis-sentinel"
	zkEnsembleLock    = "zk-ensemble"
)

// ensembleRunsMax bounds these cells' runs by default, to half the other
// cells' (rounded up, so both variants of the schedule run): a Sentinel
// kill run waits for a failover and for the old primary's demotion and
// resync (~15 s), an ensemble kill for an election. -faults.runs, when
// given, applies to them in full, as does -faults.soak.
const ensembleRunsMax = 3

func init() {
	matrix = append(matrix,
		cellSpec{redisSentinelLock, nemKill}, cellSpec{redisSentinelLock, nemPause},
		cellSpec{zkEnsembleLock, nemKill}, cellSpec{zkEnsembleLock, nemCut}, cellSpec{zkEnsembleLock, nemPause},
	)
	// A Sentinel client's first call asks a sentinel, then dials; a
	// session on an ensemble must outlive a follower's moment of doubt.
	ttls[redisSentinelLock] = 500 * time.Millisecond
	ttls[zkEnsembleLock] = 2 * time.Second
}

// ensembleRuns is the number of runs of spec's cell, given the flag's.
func ensembleRuns(spec cellSpec, runs int) int {
	if (spec.locker == redisSentinelLock || spec.locker == zkEnsembleLock) && !flagSet("faults.runs") {
		return min(runs, ensembleRunsMax)
	}
	return runs
}

// ensembleService is the lock service of these cells.
type ensembleService struct {
	sentinel *redisserver.Sentinel
	zk       *zkserver.Ensemble
}

// newEnsembleLockService fills s for the lockers of this file and reports
// whether it did. redis-sentinel: the clients' lockConfig.Addrs are the
// master name, then the sentinels' addresses; the victim reaches the
// sentinels and the nodes directly (a Sentinel client dials the address
// the sentinels give it: no proxy of the test is on that path), so the
// cells are kill and pause. zk-ensemble: every client has every member;
// the victim reaches each through a proxy of its own.
func newEnsembleLockService(t *testing.T, spec cellSpec, s *lockService) bool {
	t.Helper()
	lc := lockConfig{Kind: spec.locker}
	switch spec.locker {
	case redisSentinelLock:
		r := redisserver.NewSentinel(t)
		s.ensemble = &ensembleService{sentinel: r}
		s.dedicated = r.Nodes
		lc.Addrs, lc.Prefix = append([]string{r.MasterName()}, r.SentinelAddrs()...), "fg:faults:lock:"
		s.direct, s.victim = lc, lc
		return true
	case zkEnsembleLock:
		e := zkserver.NewEnsemble(t, 3)
		s.ensemble = &ensembleService{zk: e}
		s.dedicated = e.Members
		lc.Addrs, lc.Prefix = e.Addrs(), "/fg-faults/lock"
		s.direct, s.victim = lc, lc
		s.victim.Addrs = nil
		for _, a := range lc.Addrs {
			p := harness.NewProxy(t, a)
			s.proxies = append(s.proxies, p)
			s.victim.Addrs = append(s.victim.Addrs, p.Addr())
		}
		return true
	}
	return false
}

// ensembleNemesis adjusts n for the lockers of this file. Pause and
// partition are the shared ones (SIGSTOP of c1; c1's proxies cut, so its
// session cannot move and expires); kill is theirs:
//
//   - redis-sentinel: replication is stalled before c1 locks, so c1's lock
//     is on the primary alone; the primary is killed and the sentinels
//     fail over to the replica, which never saw the lock: c2 is granted it
//     while c1 still believes it holds it — the lost write no Redis lock
//     survives. Healed: the old primary restarts and is demoted and
//     resynced.
//   - zk-ensemble: the leader is killed; every member drops its clients
//     while they elect, c1's lease is lost at the break, sessions move to
//     the members left. Healed: the member restarts and rejoins.
func ensembleNemesis(spec cellSpec, c *cell, n *nemesis) {
	es := c.svc.ensemble
	if es == nil {
		return
	}
	n.takeover = 40 * time.Second // a failover or an election, then a lease
	if spec.nemesis != nemKill {
		return
	}
	var killed *harness.Server
	// startKilled restarts the killed server on its old port, which must
	// stay (the sentinels and the ensemble know it). Seen once in 25 runs:
	// another process had the port for a moment (a probe of another test
	// binary's port picker): try again.
	startKilled := func() error {
		if killed == nil || killed.Running() {
			return nil
		}
		var err error
		for range 5 {
			if err = killed.Start(false); err == nil || !strings.Contains(err.Error(), "port taken") {
				return err
			}
			time.Sleep(time.Second)
		}
		return err
	}
	n.cleanup = func() { startKilled() }
	switch spec.locker {
	case redisSentinelLock:
		r := es.sentinel
		n.label = "Redis primary (replication stalled) KILLED, Sentinel failover"
		n.prepare = func(ctx context.Context, _ *run) error {
			sctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if err := r.WaitSynced(sctx); err != nil {
				return err
			}
			return r.StallReplication(sctx)
		}
		n.inject = func(ctx context.Context, _ *run) error {
			kctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			var err error
			killed, _, err = r.KillPrimary(kctx)
			return err
		}
		n.heal = func(ctx context.Context, _ *run) error {
			if err := startKilled(); err != nil {
				return err
			}
			sctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			return r.WaitSynced(sctx)
		}
	case zkEnsembleLock:
		e := es.zk
		n.label = "ZooKeeper leader KILLED, election"
		n.inject = func(ctx context.Context, _ *run) error {
			lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			leader, _, err := e.Leader(lctx)
			if err != nil {
				return err
			}
			killed = leader
			return leader.Kill()
		}
		n.heal = func(ctx context.Context, _ *run) error {
			if err := startKilled(); err != nil {
				return err
			}
			lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			_, _, err := e.Leader(lctx)
			return err
		}
	}
}

// openEnsembleLocker opens the lockers of this file in a client process;
// ok is false for the others.
func openEnsembleLocker(lc lockConfig, log zkLogger) (l locks.Locker, closer func() error, err error, ok bool) {
	switch lc.Kind {
	case redisSentinelLock:
		if len(lc.Addrs) < 2 {
			return nil, nil, fmt.Errorf("redis-sentinel: addrs %v: want the master name, then sentinels", lc.Addrs), true
		}
		cli := redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:    lc.Addrs[0],
			SentinelAddrs: lc.Addrs[1:],
			DialTimeout:   time.Second,
		})
		rl, err := redislock.New(cli, redislock.Options{Prefix: lc.Prefix})
		if err != nil {
			cli.Close()
			return nil, nil, err, true
		}
		return rl, func() error { return errors.Join(rl.Close(), cli.Close()) }, nil, true
	case zkEnsembleLock:
		zl, err := zklock.New(lc.Addrs, zklock.Options{Prefix: lc.Prefix, Logger: log})
		if err != nil {
			return nil, nil, err, true
		}
		return zl, zl.Close, nil, true
	}
	return nil, nil, nil, false
}

// flagSet reports whether the flag was given on the command line.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
