package faults

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/locks/memlock"
)

var quietLog = slog.New(slog.DiscardHandler)

// A cell is one locker under one nemesis. Every run of a cell exercises
// every enforcer at once, each on its own copy of the run's items, fenced and
// off, so the controls see exactly the schedule the fenced copies see.
type cellSpec struct {
	locker, nemesis string
}

func (s cellSpec) String() string { return s.locker + "/" + s.nemesis }

// ttls are the lease TTLs, as short as each lock service allows: etcd
// counts leases in whole seconds and raises them to 1.5 election timeouts
// (2 s with its default settings, which the harness keeps); a ZooKeeper
// session lasts at least the server's minimum session timeout (1 s here).
var ttls = map[string]time.Duration{
	memLock:          200 * time.Millisecond,
	redisLock:        250 * time.Millisecond,
	redisClusterLock: 250 * time.Millisecond,
	redLock:          300 * time.Millisecond,
	etcdLock:         2 * time.Second,
	zkLock:           time.Second,
}

// Clients: c1 is the victim of every fault, c2 takes its lock over, c3
// works on the run's other item meanwhile. All three run the tail.
const (
	victim    = 1
	taker     = 2
	bystander = 3
	nClients  = 3
)

// initialStock of every item in every copy.
const initialStock = 10

// cell is one cell's servers, resources and clients.
type cell struct {
	t         *testing.T
	spec      cellSpec
	ttl       time.Duration
	enforcers []string
	res       *resourceService
	svc       *lockService
	nem       *nemesis
	procs     map[int]*clientProc
	events    chan event
	quit      chan struct{}
	readers   sync.WaitGroup
	out       *artifacts
	broken    string
}

func newCell(t *testing.T, spec cellSpec, enforcers []string, out *artifacts, broken string) *cell {
	t.Helper()
	c := &cell{
		t: t, spec: spec, ttl: ttls[spec.locker], enforcers: enforcers,
		procs:  map[int]*clientProc{},
		events: make(chan event, 4096),
		quit:   make(chan struct{}),
		out:    out, broken: broken,
	}
	c.res = newResourceService(t, enforcers)
	c.svc = newLockService(t, spec)
	c.nem = newNemesis(spec, c)
	t.Cleanup(c.stop)
	for id := 1; id <= nClients; id++ {
		cfg := clientConfig{ID: id, Lock: c.svc.direct, TTL: c.ttl, PG: c.res.dsn, MySQL: c.res.myDSN(), HTTP: c.res.base, GRPC: c.res.grpc, Enforcers: enforcers, Broken: broken}
		if id == victim {
			cfg.Lock = c.svc.victim
		}
		var p *clientProc
		var err error
		if c.svc.mem != nil {
			p, err = startMem(cfg, c.svc.mem, c.events, c.quit)
		} else {
			p, err = startProc(cfg, c.events, c.quit, &c.readers)
		}
		if err != nil {
			t.Fatalf("starting client c%d: %v", id, err)
		}
		c.procs[id] = p
	}
	ready := map[int]bool{}
	timeout := time.After(60 * time.Second)
	for len(ready) < nClients {
		select {
		case e := <-c.events:
			switch e.Kind {
			case evReady:
				ready[e.Client] = true
			case evFailed, evExited:
				t.Fatalf("client c%d did not start: %s\n%s", e.Client, e.Err, c.procs[e.Client].stderr)
			}
		case <-timeout:
			t.Fatalf("clients not ready after 60s: %v", ready)
		}
	}
	return c
}

// stop ends every client, and checks that none is left running. Events
// still coming are dropped from here on, so no reader waits for a reader
// that is gone.
func (c *cell) stop() {
	close(c.quit)
	for _, p := range c.procs {
		if err := p.stop(); err != nil {
			c.t.Error(err)
		}
	}
	c.readers.Wait()
	for _, p := range c.procs {
		if pid := p.pid(); pid != 0 && alive(pid) {
			c.t.Errorf("client c%d (pid %d) still running after the cell", p.id, pid)
		}
	}
}

// lockService is where a cell's lock service runs and how its clients
// reach it: the victim through a proxy per server wherever a nemesis needs
// one, the others directly.
type lockService struct {
	direct, victim lockConfig
	proxies        []*harness.Proxy  // the victim's, in the order of direct.Addrs
	dedicated      []*harness.Server // the cell's own servers, for the kill nemesis
	cluster        *etcdserver.Cluster
	rcluster       *redisserver.Cluster // redis-cluster
	mem            *memlock.Locker
	ensemble       *ensembleService // redis-sentinel, zk-ensemble (nemesis_ensemble_test.go)
}

func newLockService(t *testing.T, spec cellSpec) *lockService {
	t.Helper()
	s := &lockService{}
	kill := spec.nemesis == nemKill
	lc := lockConfig{Kind: spec.locker}
	if newEnsembleLockService(t, spec, s) {
		return s
	}
	switch spec.locker {
	case memLock:
		s.mem = memlock.New()
		s.direct, s.victim = lc, lc
		return s
	case redisLock:
		if kill {
			s.dedicated = []*harness.Server{redisserver.New(t)}
			lc.Addrs, lc.Prefix = []string{s.dedicated[0].Addr()}, "fg:faults:lock:"
		} else {
			db := redisserver.Shared(t)
			lc.Addrs, lc.Prefix = []string{db.Addr}, db.Prefix+"lock:"
		}
	case redLock:
		if kill {
			s.dedicated = redisserver.NewN(t, 5)
			for _, srv := range s.dedicated {
				lc.Addrs = append(lc.Addrs, srv.Addr())
			}
			lc.Prefix = "fg:faults:redlock:"
		} else {
			dbs := redisserver.SharedN(t, 5)
			for _, db := range dbs {
				lc.Addrs = append(lc.Addrs, db.Addr)
			}
			lc.Prefix = dbs[0].Prefix + "redlock:"
		}
	case redisClusterLock:
		newClusterLockService(t, s, &lc)
	case etcdLock:
		if kill {
			s.cluster = etcdserver.NewCluster(t, 3)
			s.dedicated = s.cluster.Members
			lc.Addrs, lc.Prefix = s.cluster.Endpoints(), "/fg-faults/lock/"
		} else {
			db := etcdserver.Shared(t)
			lc.Addrs, lc.Prefix = db.Endpoints, db.Prefix+"lock/"
		}
	case zkLock:
		if kill {
			s.dedicated = []*harness.Server{zkserver.New(t)}
			lc.Addrs, lc.Prefix = []string{s.dedicated[0].Addr()}, "/fg-faults/lock"
		} else {
			z := zkserver.Shared(t)
			lc.Addrs, lc.Prefix = z.Addrs, z.Chroot+"/lock"
		}
	default:
		t.Fatalf("unknown locker %q", spec.locker)
	}
	s.direct, s.victim = lc, lc
	if spec.locker == etcdLock && kill {
		return s // the victim is pinned to the leader before each run (see the etcd kill nemesis)
	}
	s.victim.Addrs = nil
	for _, a := range lc.Addrs {
		p := harness.NewProxy(t, a)
		s.proxies = append(s.proxies, p)
		s.victim.Addrs = append(s.victim.Addrs, p.Addr())
	}
	if spec.locker == redisClusterLock {
		s.victim.AddrMap = clusterAddrMap(lc.Addrs, s.proxies)
	}
	return s
}

// send sends a command to client id.
func (c *cell) send(ctx context.Context, id int, cmd command) error {
	if err := c.procs[id].send(ctx, cmd); err != nil {
		return fmt.Errorf("sending %s to c%d: %w", cmd.Kind, id, err)
	}
	return nil
}
