package servers

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/internal/servers/internal/etcdgw"
)

// EtcdDB is a test's share of an etcd cluster: use only keys under Prefix.
// The keys are deleted when the test ends.
type EtcdDB struct {
	Endpoints []string // host:port (or URLs, from the environment), for clientv3.Config.Endpoints
	Prefix    string   // e.g. "/fg/1a2b3c-7-TestLock/"; unique per test and process
	Server    *Server  // the process when the harness started it, else nil; no faults: it is shared
}

// Etcd returns the package's shared etcd server (the etcd binary, 3.4 on
// Debian 12, single member, started on first use) with a key prefix for the
// calling test.
func Etcd(t testing.TB) *EtcdDB {
	t.Helper()
	sh := sharedEtcd.get(t, startSharedEtcd)
	return etcdNamespace(t, sh.endpoints, sh.server)
}

func etcdNamespace(t testing.TB, eps []string, s *Server) *EtcdDB {
	t.Helper()
	prefix := "/fg/" + namespace(t) + "/"
	t.Cleanup(func() {
		if err := etcdDeletePrefix(eps, prefix); err != nil {
			t.Logf("servers: deleting %s on %v: %v", prefix, eps, err)
		}
	})
	return &EtcdDB{Endpoints: append([]string(nil), eps...), Prefix: prefix, Server: s}
}

type etcdShared struct {
	endpoints []string
	server    *Server
}

var sharedEtcd slot[etcdShared]

func startSharedEtcd() (etcdShared, string, error) {
	if eps := envList(EnvEtcdEndpoints); len(eps) > 0 {
		return etcdShared{endpoints: eps}, "", nil
	}
	if etcdBinary() != "" {
		c, err := launchEtcd(1)
		if err != nil {
			return etcdShared{}, "", err
		}
		return etcdShared{endpoints: c.Endpoints(), server: c.Members[0]}, "", nil
	}
	return etcdShared{}, noServerMsg("etcd", EnvEtcdEndpoints, "etcd-server"), nil
}

// NewEtcd starts a single-member etcd server for the calling test alone, to
// inject faults into; it is torn down when the test ends.
func NewEtcd(t testing.TB) *Server {
	t.Helper()
	return NewEtcdCluster(t, 1).Members[0]
}

// EtcdCluster is an etcd cluster the harness started for one test.
type EtcdCluster struct {
	Members []*Server // member i is named Members[i].Name()
}

// NewEtcdCluster starts an n-member etcd cluster for the calling test alone
// and returns once it has a leader. It is torn down (SIGKILL) when the test
// ends. A member restarted with Start(false) rejoins with its data; a member
// cannot be wiped.
func NewEtcdCluster(t testing.TB, n int) *EtcdCluster {
	t.Helper()
	requireMain(t)
	if etcdBinary() == "" {
		unavailable(t, noBinaryMsg("NewEtcd", "etcd", "etcd-server"))
	}
	c, err := launchEtcd(n)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range c.Members {
		dedicated(t, s)
	}
	return c
}

// Endpoints returns the client endpoints of all members.
func (c *EtcdCluster) Endpoints() []string {
	eps := make([]string, len(c.Members))
	for i, s := range c.Members {
		eps[i] = s.Addr()
	}
	return eps
}

// Leader returns the member that is leader now, waiting for an election in
// progress until ctx ends. Only running members are asked.
func (c *EtcdCluster) Leader(ctx context.Context) (*Server, error) {
	cli := etcdgw.New(c.Endpoints())
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, s := range c.Members {
			if !s.Running() {
				continue
			}
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := cli.Status(sctx, s.Addr())
			cancel()
			if err == nil && st.IsLeader() {
				return s, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("servers: no etcd leader: %w", context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// launchEtcd starts an n-member cluster and waits until each member answers
// and the cluster serves a linearizable read. Ports taken by others mean a
// fresh attempt; on error no member is left running.
func launchEtcd(n int) (*EtcdCluster, error) {
	var err error
	for range 3 {
		var c *EtcdCluster
		c, err = tryLaunchEtcd(n)
		if err == nil {
			return c, nil
		}
		if c != nil {
			for _, s := range c.Members {
				s.destroy()
			}
		}
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	return nil, err
}

func tryLaunchEtcd(n int) (*EtcdCluster, error) {
	k := &etcdKind{bin: etcdBinary(), members: n, token: "fg-" + runID + "-" + strconv.FormatInt(seq.Add(1), 10)}
	c := &EtcdCluster{}
	var peers []string
	for range n {
		s, err := newServer(k, "etcd", 2)
		if err != nil {
			return c, err
		}
		c.Members = append(c.Members, s)
		peers = append(peers, s.name+"=http://127.0.0.1:"+strconv.Itoa(s.peerPort))
	}
	k.initialCluster = strings.Join(peers, ",")

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for _, s := range c.Members { // all must run before any can have a quorum
		s.mu.Lock()
		err := s.spawnLocked(ctx)
		s.mu.Unlock()
		if err != nil {
			return c, err
		}
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, s := range c.Members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.mu.Lock()
			defer s.mu.Unlock()
			errs[i] = s.waitReadyLocked(ctx)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	// A linearizable read goes through the leader: the cluster is usable.
	cli := etcdgw.New(c.Endpoints())
	for {
		gctx, gcancel := context.WithTimeout(ctx, 2*time.Second)
		_, _, err := cli.Get(gctx, "fenceguard/ready")
		gcancel()
		if err == nil {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return c, fmt.Errorf("servers: etcd cluster of %d has no leader after %v: %w", n, startTimeout, err)
		case <-time.After(pollEvery):
		}
	}
}

func etcdBinary() string { return findBinary("etcd", "/usr/bin/etcd") }

// etcdKind runs one member of a cluster of the etcd binary.
type etcdKind struct {
	bin            string
	token          string // every member of one cluster needs the same
	members        int
	initialCluster string // name=peerURL,…; set before the first start
}

func (*etcdKind) prepare(ctx context.Context, s *Server) error { return nil }

func (k *etcdKind) command(s *Server) (*exec.Cmd, error) {
	client := "http://" + s.Addr()
	peer := "http://127.0.0.1:" + strconv.Itoa(s.peerPort)
	cmd := exec.Command(k.bin,
		"--name", s.name,
		"--data-dir", s.dataDir(),
		"--listen-client-urls", client,
		"--advertise-client-urls", client,
		"--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer,
		"--initial-cluster", k.initialCluster,
		"--initial-cluster-token", k.token,
		"--initial-cluster-state", "new", // ignored on restarts: the WAL knows better
		"--logger", "zap",
		"--log-outputs", "stderr",
	)
	cmd.Dir = s.dir
	// An ETCD_* variable duplicating a flag makes etcd exit.
	cmd.Env = childEnv("ETCD_", "ETCDCTL_")
	return cmd, nil
}

// probe: the member answers Status and is the member we started. A lone
// member must also serve a linearizable read; a cluster member cannot until a
// quorum runs, which launchEtcd checks for the whole cluster.
func (k *etcdKind) probe(s *Server, pid int) (func(context.Context) error, func()) {
	cli := etcdgw.New([]string{s.Addr()})
	return func(ctx context.Context) error {
		st, err := cli.Status(ctx, s.Addr())
		if err != nil {
			return err
		}
		ms, _, err := cli.MemberList(ctx, s.Addr())
		if err != nil {
			return err
		}
		for _, m := range ms {
			if m.ID == st.MemberID && m.Name != s.name {
				return fmt.Errorf("%w: member %q answers on %s", errPortTaken, m.Name, s.Addr())
			}
		}
		if k.members == 1 {
			_, _, err = cli.Get(ctx, "fenceguard/ready")
		}
		return err
	}, func() {}
}

func (*etcdKind) stopSignal() syscall.Signal { return syscall.SIGTERM }

// gracefulTeardown: a leader stopping gracefully spends seconds handing over.
func (*etcdKind) gracefulTeardown() bool { return false }

func (k *etcdKind) canWipe(*Server) error {
	if k.members > 1 {
		return errors.New("servers: an etcd cluster member cannot be wiped: it would rejoin having lost its log")
	}
	return nil
}

func etcdDeletePrefix(eps []string, prefix string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := etcdgw.New(eps).DeletePrefix(ctx, prefix)
	return err
}
